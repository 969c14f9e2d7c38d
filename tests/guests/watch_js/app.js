// A test guest (not an example) of the `http-app` world in JavaScript for `serve --watch`
// (tests/e2e/test_serve_watch.py): the tests edit VERSION in a copy of it and see the new version answer.
//   GET /count   increment "count" in the `default` store (wasi:keyvalue, the raw imports): {"version", "count"}
import { open } from "wasi:keyvalue/store@0.2.0-draft2";
import { increment } from "wasi:keyvalue/atomics@0.2.0-draft2";

const VERSION = "v1";
const encoder = new TextEncoder();

function reply(status, value) {
  const body = encoder.encode(JSON.stringify({ version: VERSION, ...value }));
  return { status, headers: [["content-type", "application/json"]], body };
}

export const handler = {
  handle(request, writer) {
    if (request.pathWithQuery.split("?")[0] !== "/count") return reply(404, { error: "no such route" });
    try {
      return reply(200, { count: Number(increment(open("default"), "count", 1n)) });
    } catch (error) {
      return reply(500, { error: error.payload ? error.payload.tag : String(error) });
    }
  },
};
