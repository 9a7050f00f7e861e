// Chat playground: forms marked data-stream are posted with fetch and their server-sent events
// (reasoning, content, tool_call, tool_result, stats, error, done, plus rendered HTML of each
// finished message) are applied to the page. Without this script the same forms still work:
// the server runs the turn and redirects back to the conversation.
(function () {
  "use strict";

  function csrfToken(form) {
    const field = form.querySelector('input[name="csrf_token"]');
    return field ? field.value : "";
  }

  let busy = false;

  // A message that arrives while a reply streams gets its buttons disabled like the others:
  // the server refuses a second post until the turn ends.
  function fragment(html) {
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    const element = template.content.firstElementChild;
    element.querySelectorAll("form[data-stream] button[type=submit]").forEach(function (b) {
      b.disabled = busy;
    });
    return element;
  }

  function setBusy(value) {
    busy = value;
    const send = document.getElementById("send-button");
    const stop = document.getElementById("stop-button");
    if (send) send.disabled = busy;
    if (stop) stop.hidden = !busy;
    document.querySelectorAll("form[data-stream] button[type=submit]").forEach(function (b) {
      if (b !== send) b.disabled = busy;
    });
  }

  function status(text, isError) {
    const line = document.getElementById("chat-status");
    if (!line) return;
    line.textContent = text;
    line.classList.toggle("error", Boolean(isError));
  }

  function scrollToEnd() {
    const messages = document.getElementById("messages");
    if (messages) messages.lastElementChild?.scrollIntoView({ block: "end" });
  }

  function streaming() {
    return document.getElementById("streaming-message");
  }

  function dropRegenerate() {
    document.querySelectorAll("#messages .regenerate").forEach(function (b) { b.closest("form").remove(); });
  }

  // The first message names a new conversation: show it in the sidebar, the title field (unless
  // the user is editing it) and the tab.
  function showTitle(title) {
    const link = document.querySelector('.conversation-list a[aria-current="page"]');
    if (!title || !link || link.textContent === title) return;
    const field = document.querySelector(".rename-form input[name=title]");
    if (field && field.value === field.defaultValue) field.value = field.defaultValue = title;
    link.textContent = title;
    document.title = title + " · MLX Manager";
  }

  let reasoningStarted = 0;

  const handlers = {
    status: function (data) { status(data.text, false); },
    error: function (data) { status(data.message, true); },
    rewind: function (data) {
      document.querySelectorAll("#messages .msg").forEach(function (el) {
        if (Number(el.dataset.position) >= data.position) el.remove();
      });
    },
    user: function (data) {
      dropRegenerate();
      document.getElementById("messages").appendChild(fragment(data.html));
      showTitle(data.title);
      scrollToEnd();
    },
    assistant_start: function (data) {
      streaming()?.remove();
      document.getElementById("messages").appendChild(fragment(data.html));
      reasoningStarted = 0;
      status("Generating…", false);
      scrollToEnd();
    },
    reasoning: function (data) {
      const block = streaming()?.querySelector(".reasoning");
      if (!block) return;
      if (!reasoningStarted) reasoningStarted = performance.now();
      block.hidden = false;
      block.querySelector(".reasoning-text").append(data.text);
    },
    content: function (data) {
      const message = streaming();
      if (!message) return;
      const block = message.querySelector(".reasoning");
      if (reasoningStarted && block.open) {
        const seconds = ((performance.now() - reasoningStarted) / 1000).toFixed(1);
        block.querySelector("summary").textContent = "Reasoning (" + seconds + " s)";
        block.open = false;
      }
      message.querySelector(".stream-text").append(data.text);
      scrollToEnd();
    },
    tool_call: function (data) {
      streaming()?.querySelector(".tool-cards").appendChild(fragment(data.html));
    },
    stats: function (data) {
      const line = streaming()?.querySelector(".stats");
      if (line && data.tokens_per_s) line.textContent = data.tokens_per_s.toFixed(1) + " tok/s";
    },
    message: function (data) {
      dropRegenerate();  // only the last reply has one (a tool round's reply is followed by more)
      const saved = fragment(data.html);
      const current = streaming();
      if (current) current.replaceWith(saved);
      else document.getElementById("messages").appendChild(saved);
      status("", false);
    },
    tool_result: function (data) {
      const cards = document.querySelectorAll('.tool-card[data-call-id="' + CSS.escape(data.tool_call_id) + '"]');
      const card = cards[cards.length - 1];
      if (card) card.querySelector(".tool-result-slot").replaceChildren(fragment(data.html));
      scrollToEnd();
    },
    done: function () { setBusy(false); },
  };

  async function readEvents(response) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      // Normalized after joining: a read can end between the \r and \n of sse-starlette's "\r\n".
      buffer = (buffer + value).replace(/\r\n/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        dispatch(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  }

  function dispatch(block) {
    let name = "message";
    const data = [];
    block.split("\n").forEach(function (line) {
      if (line.startsWith("event:")) name = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    });
    const handler = handlers[name];
    if (handler && data.length) handler(JSON.parse(data.join("\n")));
  }

  async function submitStreaming(form) {
    setBusy(true);
    status("Sending…", false);
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: new FormData(form),
        headers: { Accept: "text/event-stream", "X-CSRF-Token": csrfToken(form) },
      });
      if (!response.ok && !(response.headers.get("content-type") || "").startsWith("text/event-stream")) {
        status("The server answered " + response.status + "; reload the page and try again.", true);
        return;
      }
      if (form.id === "chat-form") form.querySelector("textarea[name=content]").value = "";
      form.closest("details.edit-message")?.removeAttribute("open");
      await readEvents(response);
    } catch (error) {
      status("The connection was lost (" + error.message + "); reload to see what was saved.", true);
    } finally {
      setBusy(false);
    }
  }

  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (form.matches("form[data-confirm]") && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
      return;
    }
    if (!form.matches("form[data-stream]") || !window.ReadableStream) return;
    event.preventDefault();
    submitStreaming(form);
  });

  document.addEventListener("keydown", function (event) {
    const input = event.target;
    if (input.id !== "chat-input" || event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    const form = input.form;
    if (!document.getElementById("send-button").disabled && input.value.trim()) form.requestSubmit();
  });

  document.addEventListener("click", function (event) {
    const target = event.target;
    if (target.id === "stop-button") {
      const form = document.getElementById("chat-form");
      fetch(target.dataset.stopUrl, {
        method: "POST",
        headers: { Accept: "application/json", "X-CSRF-Token": csrfToken(form) },
      });
      status("Stopping…", false);
    } else if (target.matches("[data-copy]")) {
      copy(target, target.closest(".code-block").querySelector("pre").textContent);
    } else if (target.matches("[data-copy-message]")) {
      const text = target.closest(".msg").querySelector(".msg-text");
      copy(target, text ? text.innerText : "");
    } else if (target.matches(".use-preset")) {
      const prompt = document.getElementById("system-prompt");
      if (prompt) {
        prompt.value = target.dataset.presetText;
        prompt.closest("details").open = true;
      }
    }
  });

  function copy(button, text) {
    if (!navigator.clipboard) return;
    navigator.clipboard.writeText(text).then(
      function () { button.textContent = "Copied"; },
      function () { button.textContent = "Copy failed"; }
    );
  }
})();
