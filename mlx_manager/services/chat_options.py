"""The playground's controls for a conversation: sampling, thinking, tools, agent mode.

Parsed from the chat form, validated with messages that say what to fix, and stored as the
conversation's `parameters` so a reload shows the same settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from mlx_manager.services.chat_tools import BUILTIN_TOOLS, ToolDefinitionError, parse_tool_definitions
from mlx_server.facade import GenerationParams, SamplingParams, Tool, chat_tools

ToolChoice = Literal["auto", "required", "none"]
AgentMode = Literal["auto", "manual"]
DEFAULT_MAX_DEPTH = 5
MAX_STOP_SEQUENCES = 4


class OptionsError(ValueError):
    """A control has a value that cannot be used; the message names it."""


@dataclass(frozen=True)
class ChatOptions:
    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 512
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    enable_thinking: bool | None = None  # None: the model's default
    builtin_tools: list[str] = field(default_factory=list)
    tools_json: str = ""  # user-defined tools, as typed in the tool editor
    mcp_servers: list[int] = field(default_factory=list)  # ids of the MCP servers whose tools are offered
    tool_choice: ToolChoice = "auto"
    agent_mode: AgentMode = "auto"
    max_depth: int = DEFAULT_MAX_DEPTH

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> ChatOptions:
        known = {k: v for k, v in stored.items() if k in cls.__dataclass_fields__}
        try:
            return cls.parse(**known)
        except (OptionsError, TypeError):
            return cls()  # settings saved by an older version: start from the defaults

    @classmethod
    def parse(cls, **values: Any) -> ChatOptions:
        options = cls(**values)
        options.check()
        return options

    def check(self) -> None:
        if not 0 <= self.temperature <= 2:
            raise OptionsError("Temperature must be between 0 and 2.")
        if not 0 < self.top_p <= 1:
            raise OptionsError("Top-p must be above 0 and at most 1.")
        if self.top_k < 0:
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
            sampling=SamplingParams(
                temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, seed=self.seed
            ),
            # The panel has no min-p or repetition penalty: the model's defaults set them.
            defaultable=frozenset({"min_p", "repetition_penalty"}),
        )

    def after_tool_round(self) -> ChatOptions:
        return replace(self, tool_choice="auto") if self.tool_choice == "required" else self

    def answer_only(self) -> ChatOptions:
        """No tools offered: the model must answer in words."""
        return replace(self, tool_choice="none")

    def stored(self) -> dict[str, Any]:
        return asdict(self)
