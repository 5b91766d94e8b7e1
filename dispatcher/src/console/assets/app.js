// agenthooks console: progressive enhancement only; every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // The create form: show the fields of the chosen handler type only.
  const form = document.querySelector("form.hook-form");
  if (!form) return;
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
});
