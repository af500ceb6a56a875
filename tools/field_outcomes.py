#!/usr/bin/env python3
"""Runs warned and killed by outcome on the recorded runs of shared/field (docs/field.md).

usage: tools/field_outcomes.py path/to/loopwatch [path/to/field] [--config FILE]
Prints one row per system and one for all: runs with a warn or kill detection, and runs
killed, of the successful, limit-hit (SWE-agent exit_cost / early_exit) and failed runs.
`info` detections count as nothing, as in the field directory's check.py.
"""
import collections, json, os, subprocess, sys

binary = sys.argv[1]
rest = sys.argv[2:]
field = rest.pop(0) if rest and not rest[0].startswith('--') else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared', 'field')
index = json.load(open(os.path.join(field, 'index.json')))
severities = collections.defaultdict(set)
for system in sorted({e['system'] for e in index}):
    out = subprocess.run([binary, 'scan', '--format', 'json', *rest, os.path.join(field, 'runs', system)],
                         capture_output=True, text=True, check=True).stdout
    for d in json.loads(out):
        severities[d['trace_id']].add(d['severity'])


def kind(e):
    if e['outcome'] in ('resolved', 'success'):
        return 'successful'
    if 'exit_cost' in e['exit_status'] or 'early_exit' in e['exit_status']:
        return 'limit-hit'
    return 'failed'


print('%-15s %-24s %-24s %-24s' % ('system', 'successful', 'limit-hit', 'failed'))
for system in sorted({e['system'] for e in index}) + ['all']:
    cells = []
    for k in ('successful', 'limit-hit', 'failed'):
        rs = [e for e in index if kind(e) == k and system in ('all', e['system'])]
        warned = sum(bool(severities[e['trace_id']] & {'warn', 'kill'}) for e in rs)
        killed = sum('kill' in severities[e['trace_id']] for e in rs)
        cells.append('%d/%d warned, %d killed' % (warned, len(rs), killed) if rs else '-')
    print('%-15s %-24s %-24s %-24s' % (system, *cells))
