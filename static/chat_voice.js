// Chat playground's voice: "Read aloud" plays a reply as the server speaks it (a streamed WAV in
// an <audio> element), and the microphone button records with MediaRecorder, has the browser
// decode the recording (its own codec: WebM/Opus in Chromium) into 16 kHz mono WAV, uploads
// that for transcription and puts the text into the message box. Both buttons are rendered
// disabled, with a hint, when no model of their kind is present.
(function () {
  "use strict";

  const HEARD_RATE = 16000;  // what speech-to-text models hear; a smaller upload too

  function readAloud(button) {
    const message = button.closest(".msg");
    let player = message.querySelector("audio.read-aloud-player");
    if (!player) {
      player = document.createElement("audio");
      player.className = "read-aloud-player";
      player.controls = true;
      player.addEventListener("error", function () {
        button.textContent = "Read aloud (failed: see the server log)";
      });
      message.querySelector(".msg-actions").after(player);
    }
    button.textContent = "Read aloud";
    player.src = button.dataset.readAloud + "?t=" + Date.now();  // a fresh reading each time
    player.play().catch(function () { /* autoplay refused: the controls are there */ });
  }

  // --- Microphone ---
  let recorder = null;

  function hint(text) {
    const element = document.getElementById("mic-status");
    if (element) element.textContent = text;
  }

  async function startRecording(button) {
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    } catch (error) {
      hint("No microphone: " + error.message);
      return;
    }
    const chunks = [];
    recorder = new MediaRecorder(stream);
    recorder.addEventListener("dataavailable", function (event) { chunks.push(event.data); });
    recorder.addEventListener("stop", function () {
      stream.getTracks().forEach(function (track) { track.stop(); });
      transcribe(button, new Blob(chunks, { type: recorder.mimeType }));
      recorder = null;
    });
    recorder.start();
    button.textContent = "Stop recording";
    button.setAttribute("aria-pressed", "true");
    hint("Recording… press again to stop.");
  }

  async function toWav(blob) {
    const decoded = await new AudioContext().decodeAudioData(await blob.arrayBuffer());
    const frames = Math.ceil(decoded.duration * HEARD_RATE);
    const offline = new OfflineAudioContext(1, Math.max(frames, 1), HEARD_RATE);
    const source = offline.createBufferSource();
    source.buffer = decoded;
    source.connect(offline.destination);
    source.start();
    const samples = (await offline.startRendering()).getChannelData(0);
    const view = new DataView(new ArrayBuffer(44 + samples.length * 2));
    const text = function (offset, value) {
      for (let i = 0; i < value.length; i++) view.setUint8(offset + i, value.charCodeAt(i));
    };
    text(0, "RIFF"); view.setUint32(4, 36 + samples.length * 2, true); text(8, "WAVE");
    text(12, "fmt "); view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
    view.setUint32(24, HEARD_RATE, true); view.setUint32(28, HEARD_RATE * 2, true);
    view.setUint16(32, 2, true); view.setUint16(34, 16, true);
    text(36, "data"); view.setUint32(40, samples.length * 2, true);
    samples.forEach(function (sample, i) {
      view.setInt16(44 + i * 2, Math.max(-1, Math.min(1, sample)) * 32767, true);
    });
    return new Blob([view], { type: "audio/wav" });
  }

  async function transcribe(button, recording) {
    button.disabled = true;
    button.textContent = "Transcribing…";
    hint("");
    try {
      const form = new FormData();
      form.append("file", await toWav(recording), "recording.wav");
      const csrf = document.querySelector("#chat-form input[name=csrf_token]").value;
      const response = await fetch(button.dataset.transcribe, {
        method: "POST", body: form, headers: { "X-CSRF-Token": csrf },
      });
      const answer = await response.text();
      if (!response.ok) throw new Error(answer);
      const input = document.getElementById("chat-input");
      input.value = (input.value.trim() ? input.value.trimEnd() + " " : "") + answer.trim();
      input.focus();
      hint(answer.trim() ? "Transcribed: check the text, then send." : "Nothing was heard; try again closer to the microphone.");
    } catch (error) {
      hint("Transcription failed: " + error.message);
    } finally {
      button.disabled = false;
      button.textContent = "Record";
      button.setAttribute("aria-pressed", "false");
    }
  }

  document.addEventListener("click", function (event) {
    const target = event.target;
    if (target.matches("[data-read-aloud]")) {
      readAloud(target);
    } else if (target.id === "mic-button") {
      if (recorder) recorder.stop();
      else startRecording(target);
    }
  });
})();
