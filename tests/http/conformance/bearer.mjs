// Preloaded into the conformance harness (node --import): the harness has no option for request
// headers, so this adds the bearer token to every request it sends to the server under test.
// Both its fetch() calls and its direct undici requests go through undici's global dispatcher.
import { createRequire } from "node:module";

const token = process.env.NBRELAY_CONFORMANCE_TOKEN;
const origin = process.env.NBRELAY_CONFORMANCE_ORIGIN;
const require = createRequire(`${process.env.NBRELAY_CONFORMANCE_MODULES}/`);
const { Agent, setGlobalDispatcher } = require("undici");

function withToken(headers) {
  const value = `Bearer ${token}`;
  if (Array.isArray(headers)) {
    for (let i = 0; i < headers.length; i += 2) {
      if (String(headers[i]).toLowerCase() === "authorization") return headers;
    }
    return [...headers, "authorization", value];
  }
  const plain = { ...(headers || {}) };
  if (!Object.keys(plain).some((k) => k.toLowerCase() === "authorization")) {
    plain.authorization = value;
  }
  return plain;
}

setGlobalDispatcher(
  new Agent().compose((dispatch) => (opts, handler) => {
    if (token && origin && String(opts.origin).startsWith(origin)) {
      opts = { ...opts, headers: withToken(opts.headers) };
    }
    return dispatch(opts, handler);
  }),
);
