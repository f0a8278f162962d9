// The approver page's script: passkey sign-in and registration, votes signed by the
// passkey, answers, and a page that refreshes when the person's asks change.
// Every rule is checked by the server; this only carries what the browser's
// authenticator signs. Written by hand: it is small, and the page loads nothing else.
"use strict";

const base = document.body.dataset.base;
// Set once this page has shown the person's own response: it no longer reloads itself.
let responded = false;

// -- base64url <-> bytes (WebAuthn's JSON forms carry bytes as unpadded base64url) --

function toBytes(text) {
  let b64 = text.replace(/-/g, "+").replace(/_/g, "/");
  while (b64.length % 4) b64 += "=";
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

function fromBytes(buffer) {
  let text = "";
  for (const byte of new Uint8Array(buffer)) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function creationOptions(json) {
  return {
    ...json,
    challenge: toBytes(json.challenge),
    user: { ...json.user, id: toBytes(json.user.id) },
    excludeCredentials: (json.excludeCredentials || []).map((c) => ({ ...c, id: toBytes(c.id) })),
  };
}

function requestOptions(json) {
  return {
    ...json,
    challenge: toBytes(json.challenge),
    allowCredentials: (json.allowCredentials || []).map((c) => ({ ...c, id: toBytes(c.id) })),
  };
}

function credentialJSON(credential) {
  if (typeof credential.toJSON === "function") return credential.toJSON();
  const r = credential.response;
  const response = { clientDataJSON: fromBytes(r.clientDataJSON) };
  if (r.attestationObject) response.attestationObject = fromBytes(r.attestationObject);
  if (r.authenticatorData) response.authenticatorData = fromBytes(r.authenticatorData);
  if (r.signature) response.signature = fromBytes(r.signature);
  if (r.userHandle) response.userHandle = fromBytes(r.userHandle);
  if (typeof r.getTransports === "function") response.transports = r.getTransports();
  return {
    id: credential.id,
    rawId: fromBytes(credential.rawId),
    type: credential.type,
    response,
    clientExtensionResults: credential.getClientExtensionResults(),
  };
}

// -- talking to the server --

class Refused extends Error {
  constructor(body, status) {
    super(body.message || `HTTP ${status}`);
    this.code = body.code || `HTTP_${status}`;
    this.data = body.data || {};
    this.status = status;
  }
  get reason() {
    return this.data.passkeyReason || this.data.reason || null;
  }
}

async function call(method, path, body) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(`${base}/api/${path}`, init);
  const text = await response.text();
  let parsed = {};
  try {
    parsed = text ? JSON.parse(text) : {};
  } catch (_) {
    parsed = { message: text };
  }
  if (!response.ok) throw new Refused(parsed, response.status);
  return parsed;
}

function say(text, kind) {
  const box = document.getElementById("message");
  box.textContent = text;
  box.className = `message ${kind || "error"}`;
  box.hidden = false;
}

function sayRefused(error) {
  if (error instanceof Refused) {
    const reason = error.reason ? ` (${error.reason})` : "";
    say(`Refused: ${error.code}${reason}: ${error.message}`);
  } else if (error && error.name === "NotAllowedError") {
    say("The passkey prompt was closed or timed out; nothing was sent. Try again.");
  } else {
    say(`Something went wrong: ${error}`);
  }
}

async function busy(buttons, work) {
  buttons.forEach((b) => (b.disabled = true));
  try {
    await work();
  } catch (error) {
    sayRefused(error);
    if (error instanceof Refused && error.code === "UNAUTHENTICATED") {
      setTimeout(() => location.reload(), 1500);
    }
  } finally {
    buttons.forEach((b) => (b.disabled = false));
  }
}

// -- the pages --

function signInPage() {
  const button = document.getElementById("sign-in");
  button.addEventListener("click", () =>
    busy([button], async () => {
      const options = await call("POST", "sign-in/options", {});
      const credential = await navigator.credentials.get({ publicKey: requestOptions(options) });
      await call("POST", "sign-in", { credential: credentialJSON(credential) });
      const next = button.dataset.next;
      location.assign(next && next.startsWith(`${base}/`) ? next : base);
    }),
  );
}

async function enrolPage() {
  const invite = new URLSearchParams(location.hash.slice(1)).get("invite") || "";
  const intro = document.getElementById("enrol-for");
  const button = document.getElementById("register");
  let options;
  try {
    const answer = await call("POST", "enrol/options", { invite });
    options = answer.options;
    intro.textContent = `This invitation registers a passkey for ${answer.human} (${answer.displayName}).`;
    button.hidden = false;
  } catch (error) {
    intro.textContent = "This invitation cannot be used.";
    sayRefused(error);
    return;
  }
  button.addEventListener("click", () =>
    busy([button], async () => {
      const credential = await navigator.credentials.create({ publicKey: creationOptions(options) });
      const done = await call("POST", "enrol", { invite, credential: credentialJSON(credential) });
      history.replaceState(null, "", location.pathname);
      button.hidden = true;
      intro.textContent = `Passkey ${done.kid} is on ${done.human}'s card.`;
      document.getElementById("registered").hidden = false;
    }),
  );
}

async function watchInbox() {
  const holder = document.getElementById("inbox");
  let version = holder ? holder.dataset.version : null;
  for (;;) {
    try {
      const since = version === null ? "" : `since=${encodeURIComponent(version)}&`;
      const answer = await call("GET", `inbox?${since}waitSeconds=25`);
      if (version !== null && answer.version !== version) {
        if (!responded) location.reload();
        return;
      }
      version = answer.version;
    } catch (error) {
      if (error instanceof Refused && error.code === "UNAUTHENTICATED") {
        location.reload();
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 5000));
    }
  }
}

function askPage() {
  const article = document.getElementById("ask");
  const askId = article.dataset.ask;
  const withPasskey = article.dataset.passkey === "true";
  const buttons = Array.from(document.querySelectorAll("#respond button"));
  for (const button of document.querySelectorAll("button[data-decision]")) {
    button.addEventListener("click", () =>
      busy(buttons, async () => {
        const decision = button.dataset.decision;
        const body = { decision };
        if (withPasskey) {
          const options = await call("POST", `asks/${askId}/options`, { decision });
          const credential = await navigator.credentials.get({ publicKey: requestOptions(options) });
          body.credential = credentialJSON(credential);
        }
        showProgress(await call("POST", `asks/${askId}/vote`, body), `Recorded: ${decision}.`);
      }),
    );
  }
  const decline = document.getElementById("decline");
  if (decline) {
    decline.addEventListener("click", () =>
      busy(buttons, async () => {
        showProgress(await call("POST", `asks/${askId}/decline`, {}), "Declined: the gateway asks someone else.");
      }),
    );
  }
  const form = document.getElementById("answer-form");
  if (form) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      busy(buttons, async () => {
        const value = answerValue(form);
        showProgress(await call("POST", `asks/${askId}/answer`, { value }), "Recorded your answer.");
      });
    });
  }
}

// After a response: the ask's new state, in place (the server may be gone by a reload).
function showProgress(progress, said) {
  responded = true;
  document.getElementById("ask-state").textContent = progress.stateWords;
  const respond = document.getElementById("respond");
  if (respond) respond.hidden = true;
  say(said, "ok");
}

// The value an answer form stands for; the server checks it fits the question.
function answerValue(form) {
  const type = form.dataset.type;
  if (type === "choose") {
    const picked = form.querySelector("input[name=choice]:checked");
    return picked ? picked.dataset.value : null;
  }
  if (type === "text") return form.querySelector("textarea[name=text]").value;
  const json = form.querySelector("textarea[name=json]");
  if (json) {
    try {
      return JSON.parse(json.value);
    } catch (_) {
      throw new Error("that is not JSON");
    }
  }
  const value = {};
  for (const input of form.querySelectorAll("[data-kind]")) {
    const kind = input.dataset.kind;
    if (kind === "boolean") {
      value[input.name] = input.checked;
    } else if (input.tagName === "SELECT") {
      const option = input.selectedOptions[0];
      if (option && !option.dataset.empty) value[input.name] = option.dataset.value;
    } else if (input.value !== "") {
      value[input.name] = kind === "number" || kind === "integer" ? Number(input.value) : input.value;
    }
  }
  return value;
}

function signOut() {
  const button = document.getElementById("sign-out");
  if (!button) return;
  button.addEventListener("click", () =>
    busy([button], async () => {
      await call("POST", "sign-out", {});
      location.assign(base);
    }),
  );
}

const pages = {
  "sign-in": signInPage,
  enrol: enrolPage,
  inbox: () => watchInbox(),
  ask: () => {
    askPage();
    watchInbox();
  },
};
signOut();
(pages[document.body.dataset.page] || (() => {}))();
