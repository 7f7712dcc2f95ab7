#!/usr/bin/env python3
"""Mutation pass: each mutation of mutations.txt applied alone in a scratch git
worktree of HEAD, its test run; a test that still passes did not catch it.

    python3 tests/mutants/run.py [--list FILE] [--only SUBSTRING]

Builds go to target/mutants (kept between runs, so a second pass is quick). Run
by hand before a release: a full pass takes about 6 minutes on 2 cores, too
long for CI. Exit 1 when a mutation was missed, 2 when the list is wrong.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True).stdout.strip()


def parse(path):
    mutations, current = [], None
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            tag, _, rest = line.partition(" ")
            if tag == "@":
                current = {"file": rest, "line": number}
                mutations.append(current)
            elif current is None or tag not in ("-", "+", "$"):
                sys.exit(f"{path}:{number}: expected `@ FILE` first, then `- `, `+ `, `$ ` lines")
            else:
                current[{"-": "old", "+": "new", "$": "test"}[tag]] = rest
    for m in mutations:
        missing = [k for k in ("old", "new", "test") if k not in m]
        if missing:
            sys.exit(f"{path}:{m['line']}: the block lacks {', '.join(missing)}")
    return mutations


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", default=os.path.join(ROOT, "tests/mutants/mutations.txt"))
    parser.add_argument("--only", help="run only the mutations whose file or test contains this")
    args = parser.parse_args()
    mutations = [m for m in parse(args.list) if not args.only or args.only in m["file"] + m["test"]]
    scratch = tempfile.mkdtemp(prefix="tether-mutants-")
    tree = os.path.join(scratch, "tree")
    subprocess.run(["git", "worktree", "add", "--detach", "-q", tree, "HEAD"], cwd=ROOT, check=True)
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target", "mutants"), INSTA_UPDATE="no")
    missed, broken = [], []
    try:
        for m in mutations:
            path = os.path.join(tree, m["file"])
            with open(path, encoding="utf-8") as f:
                original = f.read()
            found = original.count(m["old"].strip())
            if found != 1:
                broken.append(m)
                print(f"BROKEN  {m['file']}: the text occurs {found} times: {m['old']!r}")
                continue
            with open(path, "w", encoding="utf-8") as f:
                f.write(original.replace(m["old"].strip(), m["new"].strip()))
            started = time.monotonic()
            run = subprocess.run(m["test"], shell=True, cwd=tree, env=env, capture_output=True, text=True)
            took = time.monotonic() - started
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)
            compiled = "error[E" not in run.stderr
            verdict = "caught" if run.returncode != 0 else "MISSED"
            if run.returncode != 0 and not compiled:
                verdict = "BROKEN"  # the mutation does not compile: it tests nothing
                broken.append(m)
            elif run.returncode == 0:
                missed.append(m)
            print(f"{verdict:7} {m['file']}: {m['old'].strip()!r} -> {m['new'].strip()!r} ({took:.0f} s: {m['test']})")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=ROOT, check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{len(mutations)} mutations: {len(mutations) - len(missed) - len(broken)} caught, "
          f"{len(missed)} missed, {len(broken)} broken")
    if broken:
        sys.exit(2)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
