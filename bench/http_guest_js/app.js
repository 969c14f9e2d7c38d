// Benchmark guest of the `http-app` world in JavaScript: answers every request with "ok" (no LLM), the counterpart
// of bench/http_guest/app.py, to time a fresh instance per request (bench/js_guests.py).
const ok = new TextEncoder().encode("ok");

export const handler = {
  handle(request, writer) {
    return { status: 200, headers: [["content-type", "text/plain"]], body: ok };
  },
};
