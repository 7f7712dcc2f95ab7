"""tether's `$BROWSER` in the peers suite: plays the person at the browser.

    browser.py VISITS_FILE URL

Fetches URL and follows every redirect (keeping cookies, as a browser does) (the auto-approving authorization servers
send the browser straight back to tether's loopback callback), then appends one
JSON line to VISITS_FILE: the URL's path (never its query: no state or PKCE value
lands in a log), the final status, and the hosts it passed through. Standard library
only; never more than 30 s.
"""

import http.cookiejar
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


class Trail(urllib.request.HTTPRedirectHandler):
    def __init__(self):
        self.hops = []

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        parsed = urllib.parse.urlsplit(newurl)
        self.hops.append(f"{code} -> {parsed.scheme}://{parsed.netloc}{parsed.path}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def main() -> int:
    visits, url = sys.argv[1], sys.argv[2]
    trail = Trail()
    opener = urllib.request.build_opener(trail, urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    record = {"at": time.time(), "path": urllib.parse.urlsplit(url).path}
    try:
        with opener.open(url, timeout=30) as r:
            body = r.read(2000).decode("utf-8", "replace")
            record.update(status=r.status, final=urllib.parse.urlsplit(r.geturl()).path, body=body[:200])
    except urllib.error.HTTPError as e:
        record.update(status=e.code, error=e.read(500).decode("utf-8", "replace"))
    except Exception as e:  # noqa: BLE001
        record.update(status=None, error=f"{type(e).__name__}: {e}")
    record["hops"] = trail.hops
    with open(visits, "a") as f:
        f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
