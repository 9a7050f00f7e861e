// Chat playground: what htmx does not do. Sending, following a turn (htmx's SSE extension) and
// every action are server-rendered; this keeps the view at the newest text, sends on Enter,
// empties the message box once a message is accepted, and copies text.
(function () {
  "use strict";

  // Follow the reply as it grows, unless the user scrolled up to read.
  let following = true;
  window.addEventListener("scroll", function () {
    following = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  });
  function scrollToEnd() {
    const messages = document.getElementById("messages");
    if (following && messages) messages.lastElementChild?.scrollIntoView({ block: "end" });
  }
  document.addEventListener("htmx:sseMessage", scrollToEnd);
  document.addEventListener("htmx:afterSettle", scrollToEnd);
  document.addEventListener("DOMContentLoaded", scrollToEnd);

  document.addEventListener("htmx:afterRequest", function (event) {
    const form = event.detail.elt;
    if (form.id === "chat-form" && event.detail.xhr.status < 300) form.querySelector("#chat-input").value = "";
  });

  document.addEventListener("keydown", function (event) {
    const input = event.target;
    if (input.id !== "chat-input" || event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    if (!document.getElementById("send-button").disabled && input.value.trim()) input.form.requestSubmit();
  });

  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (form.matches("form[data-confirm]") && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });

  document.addEventListener("click", function (event) {
    const target = event.target;
    if (target.matches("[data-copy]")) {
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
