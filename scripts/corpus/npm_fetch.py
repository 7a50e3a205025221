#!/usr/bin/env python3
"""Fetches an npm package's published tarball from the npm registry without npm (stdlib only).

Usage: npm_fetch.py NAME@VERSION DIR
Writes DIR/NAME-VERSION.tgz (the file `npm pack NAME@VERSION` writes: the registry's tarball byte for byte) after
checking it against the registry's own integrity record for that version (dist.integrity, sha512; dist.shasum, sha1,
where a version has no integrity field). The file appears only when complete and verified (a temporary name, then a
rename). Exit 2 with a message on any failure (unknown version, network, digest mismatch).
Why not npm: a fresh Debian 12 machine has no npm, and Debian's npm pulls in about 300 packages for two tarballs.
"""
import base64
import hashlib
import json
import os
import sys
import urllib.error
import urllib.request

REGISTRY = os.environ.get("HLM_NPM_REGISTRY", "https://registry.npmjs.org")


def fail(msg):
    print(f"npm_fetch.py: {msg}", file=sys.stderr)
    sys.exit(2)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.read()
    except (urllib.error.URLError, OSError) as e:
        fail(f"cannot fetch {url}: {e}")


def main():
    if len(sys.argv) != 3 or "@" not in sys.argv[1][1:]:
        fail("usage: npm_fetch.py NAME@VERSION DIR")
    spec, out_dir = sys.argv[1], sys.argv[2]
    name, version = spec.rsplit("@", 1)
    if name.startswith("@"):
        fail(f"scoped packages are not handled: {spec}")
    meta = json.loads(get(f"{REGISTRY}/{name}/{version}"))
    dist = meta.get("dist") or fail(f"{spec}: the registry record has no dist")
    data = get(dist["tarball"])
    integrity = dist.get("integrity", "")
    if integrity.startswith("sha512-"):
        want, got = integrity[7:], base64.b64encode(hashlib.sha512(data).digest()).decode()
    elif dist.get("shasum"):
        want, got = dist["shasum"], hashlib.sha1(data).hexdigest()
    else:
        fail(f"{spec}: the registry gives no digest to check")
    if want != got:
        fail(f"{spec}: digest mismatch ({len(data)} bytes from {dist['tarball']})")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}-{version}.tgz")
    with open(path + ".part", "wb") as f:
        f.write(data)
    os.replace(path + ".part", path)
    print(f"npm_fetch.py: {path} ({len(data)} bytes, digest checked)")


if __name__ == "__main__":
    main()
