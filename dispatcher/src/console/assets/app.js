// agenthooks console: progressive enhancement only; every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.querySelector("form.hook-form");
  if (!form) return;

  // Show the fields of the chosen handler type only.
  const show = () => {
    const chosen = form.querySelector('input[name="handler"]:checked');
    for (const fs of form.querySelectorAll("fieldset.handler")) {
      fs.hidden = !chosen || fs.dataset.handler !== chosen.value;
    }
  };
  for (const radio of form.querySelectorAll('input[name="handler"]')) {
    radio.addEventListener("change", show);
  }
  show();

  // Live validation: the server's own checks (POST /ui/hooks/validate) as the form is
  // filled in; the result is announced in a polite live region.
  const region = document.getElementById("live-validation");
  let timer = null;
  let seq = 0;
  const validate = async () => {
    const body = new URLSearchParams(new FormData(form));
    body.set("action", "validate");
    const mine = ++seq;
    let answer;
    try {
      const r = await fetch("/ui/hooks/validate", { method: "POST", body, credentials: "same-origin" });
      answer = await r.json();
      if (r.status === 401 && answer.signIn) { window.location.assign(answer.signIn); return; }
    } catch (e) {
      return; // the submit buttons still validate on the server
    }
    if (mine !== seq) return; // a newer check is on its way
    region.replaceChildren();
    for (const el of form.querySelectorAll('[aria-invalid="true"]')) el.removeAttribute("aria-invalid");
    if (answer.valid) {
      const p = document.createElement("p");
      p.className = "ok";
      p.textContent = "Valid so far.";
      region.append(p);
      return;
    }
    for (const e of answer.errors) {
      const p = document.createElement("p");
      p.className = "error";
      p.dataset.field = e.field;
      p.textContent = e.message;
      region.append(p);
    }
  };
  form.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(validate, 500);
  });
  form.addEventListener("change", () => {
    clearTimeout(timer);
    timer = setTimeout(validate, 100);
  });
});
