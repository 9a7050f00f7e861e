// Chat playground: what htmx does not do. Sending, following a turn (htmx's SSE extension) and
// every action are server-rendered; this keeps the view at the newest text, sends on Enter,
// empties the message box once a message is accepted, copies text, and gathers the images to
// attach (button, paste, drag and drop) into the form's file input.
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
    if (form.id !== "chat-form" || event.detail.xhr.status >= 300) return;
    form.querySelector("#chat-input").value = "";
    setAttachments([]);
  });

  // Images to send with the message: chosen with the button, pasted or dropped on the composer.
  // The file input holds them (the form posts it as multipart); previews are local blob: URLs.
  const IMAGE_TYPES = ["image/png", "image/jpeg", "image/webp", "image/gif"];
  let attachments = [];

  function setAttachments(files) {
    const input = document.getElementById("image-input");
    const previews = document.getElementById("attachment-previews");
    if (!input || !previews) return;
    attachments = files;
    const transfer = new DataTransfer();
    files.forEach(function (file) { transfer.items.add(file); });
    input.files = transfer.files;
    previews.querySelectorAll("img").forEach(function (img) { URL.revokeObjectURL(img.src); });
    previews.replaceChildren(...files.map(function (file, index) {
      const item = document.createElement("div");
      item.className = "attachment";
      const img = document.createElement("img");
      img.className = "thumb";
      img.alt = "To send: " + file.name;
      img.src = URL.createObjectURL(file);
      const remove = document.createElement("button");
      remove.type = "button";
      remove.textContent = "×";
      remove.title = "Remove " + file.name;
      remove.dataset.removeAttachment = String(index);
      item.append(img, remove);
      return item;
    }));
  }

  function attach(files) {
    const input = document.getElementById("image-input");
    if (!input || input.disabled) return false;
    const images = Array.from(files).filter(function (file) { return IMAGE_TYPES.includes(file.type); });
    if (images.length) setAttachments(attachments.concat(images));
    return images.length > 0;
  }

  document.addEventListener("change", function (event) {
    const target = event.target;
    if (target.id === "image-input") {
      const chosen = Array.from(target.files);
      target.files = new DataTransfer().files;  // attach() puts back the full list
      attach(chosen) || setAttachments(attachments);
    } else if (target.matches("#chat-form select[name=model_id]")) {
      const vision = target.selectedOptions[0]?.hasAttribute("data-vision");
      const input = document.getElementById("image-input");
      if (!input) return;
      input.disabled = !vision;
      document.getElementById("attach-button").classList.toggle("disabled", !vision);
      document.getElementById("attach-hint").textContent = vision
        ? "or paste or drop images here"
        : "The selected model reads text only: pick a vision model to attach images.";
      if (!vision) setAttachments([]);
    }
  });

  document.addEventListener("paste", function (event) {
    if (event.target.closest?.("#chat-form") && attach(event.clipboardData.files)) event.preventDefault();
  });
  document.addEventListener("dragover", function (event) {
    const form = event.target.closest?.("#chat-form");
    if (!form || document.getElementById("image-input")?.disabled) return;
    event.preventDefault();
    form.classList.add("dropping");
  });
  document.addEventListener("dragleave", function (event) {
    event.target.closest?.("#chat-form")?.classList.remove("dropping");
  });
  document.addEventListener("drop", function (event) {
    const form = event.target.closest?.("#chat-form");
    if (!form) return;
    form.classList.remove("dropping");
    if (attach(event.dataTransfer.files)) event.preventDefault();
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
    } else if (target.matches("[data-remove-attachment]")) {
      const index = Number(target.dataset.removeAttachment);
      setAttachments(attachments.filter(function (_, i) { return i !== index; }));
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
