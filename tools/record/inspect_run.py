#!/usr/bin/env python3
"""Prints the spans of one recorded run (a folder of req-NNNN.json) in start order, with
their attributes and events shortened: what a convention author needs to see.

    python3 tools/record/inspect_run.py tests/fixtures/corpus/<framework>/<variant>/<scenario>
"""
import glob
import json
import os
import sys


def value(v):
    for k, x in v.items():
        if k == "arrayValue":
            return [value(i) for i in x.get("values", [])]
        return x
    return None


def main(folder, width=110):
    spans = []
    for f in sorted(glob.glob(os.path.join(folder, "req-*.json"))):
        for rs in json.load(open(f)).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    spans.append((os.path.basename(f), ss.get("scope", {}).get("name"), s))
    spans.sort(key=lambda x: int(x[2].get("startTimeUnixNano", 0)))
    for f, scope, s in spans:
        print(f"{f} [{scope}] {s['name']!r} kind={s.get('kind')} id={s['spanId']} parent={s.get('parentSpanId', '')}")
        for a in s.get("attributes", []):
            print(f"    {a['key']} = {str(value(a['value']))[:width]!r}")
        for e in s.get("events", []):
            print(f"    event {e['name']}: " + ", ".join(f"{a['key']}={str(value(a['value']))[:width]!r}" for a in e.get("attributes", [])))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 110)
