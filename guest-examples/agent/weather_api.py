"""A tiny local weather API for the agent example (not part of the guest): `python3 weather_api.py [PORT]`.

    GET /weather?city=NAME      200 {"city", "temperature_c", "sky"} (made-up, the same for a name every time)
    GET /population?city=NAME   200 {"city", "population"} for the cities it knows, else 404 {"error"}

It logs one line per request to stderr (`weather-api: GET /weather?city=Paris -> 200`), and listens on
127.0.0.1 only. The standard library only, so it runs with any Python 3.
"""

import json
import sys
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

SKIES = ["clear", "sunny", "cloudy", "overcast", "light rain", "windy"]
POPULATION = {"paris": 2_102_650, "london": 8_945_309, "tokyo": 13_960_236, "nairobi": 4_397_073}


def answer(path, city):
    key = city.strip().lower()
    if path == "/weather" and key:
        seed = zlib.crc32(key.encode())
        return 200, {"city": city, "temperature_c": seed % 30 - 2, "sky": SKIES[seed % len(SKIES)]}
    if path == "/population" and key in POPULATION:
        return 200, {"city": city, "population": POPULATION[key]}
    if path == "/population":
        return 404, {"error": f"no population known for {city!r}"}
    return 404, {"error": f"no such endpoint {path!r} (try /weather?city=Paris)"}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        city = parse_qs(url.query).get("city", [""])[0]
        status, value = answer(url.path, city)
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        print(f"weather-api: GET {self.path} -> {status}", file=sys.stderr, flush=True)

    def log_message(self, format, *args):  # noqa: A002 (the base class's name): one line per request, above
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8081
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"weather-api: listening on http://127.0.0.1:{server.server_address[1]}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
