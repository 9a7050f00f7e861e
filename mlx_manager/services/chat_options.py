"""The playground's controls for a conversation: sampling, thinking, tools, agent mode.

Read from the chat form (`ChatForm`, a typed FastAPI `Form()` model), validated with messages
that say what to fix, and stored as the conversation's `parameters` (flat, so a reload shows
the same settings). The sampling controls are the pipeline's own `SamplingParams`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel

from mlx_manager.services.chat_tools import BUILTIN_TOOLS, ToolDefinitionError, parse_tool_definitions
from mlx_manager.services.forms import FormError
from mlx_server.facade import GenerationParams, SamplingParams, Tool, chat_tools

ToolChoice = Literal["auto", "required", "none"]
AgentMode = Literal["auto", "manual"]
DEFAULT_MAX_DEPTH = 5
MAX_STOP_SEQUENCES = 4
# The SamplingParams fields the parameters panel sets; the model's defaults set the others.
PANEL_SAMPLING = ("temperature", "top_p", "top_k", "seed")


class OptionsError(ValueError):
    """A control has a value that cannot be used; the message names it."""


def _panel_sampling() -> SamplingParams:
    return SamplingParams(temperature=0.7)


@dataclass(frozen=True)
class ChatOptions:
    sampling: SamplingParams = field(default_factory=_panel_sampling)
    max_tokens: int = 512
    stop: list[str] = field(default_factory=list)
    enable_thinking: bool | None = None  # None: the model's default
    builtin_tools: list[str] = field(default_factory=list)
    tools_json: str = ""  # user-defined tools, as typed in the tool editor
    mcp_servers: list[int] = field(default_factory=list)  # ids of the MCP servers whose tools are offered
    tool_choice: ToolChoice = "auto"
    agent_mode: AgentMode = "auto"
    max_depth: int = DEFAULT_MAX_DEPTH

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> ChatOptions:
        names = {*PANEL_SAMPLING, *cls.__dataclass_fields__} - {"sampling"}
        known = {k: v for k, v in stored.items() if k in names}
        try:
            return cls.parse(**known)
        except (OptionsError, TypeError):
            return cls()  # settings saved by an older version: start from the defaults

    @classmethod
    def parse(cls, **values: Any) -> ChatOptions:
        """Options from flat values (the stored form): the panel's sampling fields by name."""
        panel = {name: values.pop(name) for name in PANEL_SAMPLING if name in values}
        options = cls(sampling=replace(_panel_sampling(), **panel), **values)
        options.check()
        return options

    def check(self) -> None:
        if not 0 <= self.sampling.temperature <= 2:
            raise OptionsError("Temperature must be between 0 and 2.")
        if not 0 < self.sampling.top_p <= 1:
            raise OptionsError("Top-p must be above 0 and at most 1.")
        if self.sampling.top_k < 0:
            raise OptionsError("Top-k must be 0 (off) or more.")
        if not 1 <= self.max_tokens <= 32768:
            raise OptionsError("Max tokens must be between 1 and 32768.")
        if len(self.stop) > MAX_STOP_SEQUENCES:
            raise OptionsError(f"At most {MAX_STOP_SEQUENCES} stop sequences.")
        if not 1 <= self.max_depth <= 20:
            raise OptionsError("The agent loop's maximum depth must be between 1 and 20.")
        unknown = sorted(set(self.builtin_tools) - set(BUILTIN_TOOLS))
        if unknown:
            raise OptionsError(f"Unknown built-in tools: {', '.join(unknown)}.")
        if self.tool_choice not in ("auto", "required", "none"):
            raise OptionsError('Tool choice must be "auto", "required" or "none".')
        if self.agent_mode not in ("auto", "manual"):
            raise OptionsError('Agent mode must be "auto" or "manual".')
        try:
            self.user_tools()
        except ToolDefinitionError as exc:
            raise OptionsError(f"Tool editor: {exc}") from exc
        if self.tool_choice == "required" and not self.tools() and not self.mcp_servers:
            raise OptionsError(
                'Tool choice "required" needs at least one tool: enable a built-in, an MCP server or add one.'
            )

    def user_tools(self) -> list[dict[str, Any]]:
        return parse_tool_definitions(self.tools_json) if self.tools_json.strip() else []

    def tools(self) -> tuple[Tool, ...] | None:
        """The enabled built-in tools and the editor's, as the pipeline takes them."""
        return chat_tools([BUILTIN_TOOLS[name].definition for name in self.builtin_tools] + self.user_tools())

    def runs_here(self, tool_name: str) -> bool:
        """Whether the server executes this call (auto mode, an enabled built-in tool)."""
        return self.agent_mode == "auto" and tool_name in self.builtin_tools

    def generation_params(self) -> GenerationParams:
        return GenerationParams(
            max_tokens=self.max_tokens,
            stop=list(self.stop),
            sampling=self.sampling,
            # The panel has no min-p or repetition penalty: the model's defaults set them.
            defaultable=frozenset({"min_p", "repetition_penalty"}),
        )

    def after_tool_round(self) -> ChatOptions:
        return replace(self, tool_choice="auto") if self.tool_choice == "required" else self

    def answer_only(self) -> ChatOptions:
        """No tools offered: the model must answer in words."""
        return replace(self, tool_choice="none")

    def stored(self) -> dict[str, Any]:
        """Flat: the panel's sampling fields beside the others (as `parse` takes them)."""
        flat = asdict(self)
        sampling = flat.pop("sampling")
        return {**{name: sampling[name] for name in PANEL_SAMPLING}, **flat}


class ChatForm(BaseModel):
    """The composer and its parameters panel as posted (read with FastAPI's `Form()`): text as
    typed, so a field that is not a number gets a message naming it, not a 422."""

    model_id: str = ""
    content: str = ""
    system_prompt: str = ""
    temperature: str = ""
    top_p: str = ""
    top_k: str = ""
    max_tokens: str = ""
    seed: str = ""
    stop: str = ""
    thinking: str = ""
    builtin_tools: list[str] = []
    tools_json: str = ""
    mcp_servers: list[str] = []
    tool_choice: str = ""
    agent_mode: str = ""
    max_depth: str = ""

    def options(self) -> ChatOptions:
        """The panel as ChatOptions (an empty field takes its default); FormError or
        OptionsError says what to fix."""
        defaults = ChatOptions()
        return ChatOptions.parse(
            temperature=_number(self.temperature, "Temperature", float, defaults.sampling.temperature),
            top_p=_number(self.top_p, "Top p", float, defaults.sampling.top_p),
            top_k=_number(self.top_k, "Top k", int, defaults.sampling.top_k),
            seed=_number(self.seed, "Seed", int, None),
            max_tokens=_number(self.max_tokens, "Max tokens", int, defaults.max_tokens),
            stop=[line for line in self.stop.replace("\r\n", "\n").split("\n") if line],
            enable_thinking={"on": True, "off": False}.get(self.thinking),
            builtin_tools=self.builtin_tools,
            tools_json=self.tools_json,
            mcp_servers=[int(value) for value in self.mcp_servers if value.isdigit()],
            tool_choice=self.tool_choice or "auto",
            agent_mode=self.agent_mode or "auto",
            max_depth=_number(self.max_depth, "Max depth", int, defaults.max_depth),
        )


def _number(text: str, label: str, kind: type[float] | type[int], default: float | None) -> Any:
    text = text.strip()
    if not text:
        return default
    try:
        return kind(text)
    except ValueError:
        raise FormError(f"{label} must be a number, not {text!r}.") from None
