"""Per-CTA figures of a decode timeline record (../decode_timeline/timeline.py --json), grouped by how many tiles a CTA
took: its main loop (first K stage to its last P V), its first K stage after griddepcontrol.wait's return, and its end
after the previous call's last end; medians (and extremes) over the CTAs of each recorded call given.

    python3 benchmarks/decode_b64_ncu/tiles.py TIMELINE.json[.gz] [--calls 1,2,8]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="timeline.py's --json file (gzip or plain)")
    parser.add_argument("--calls", default="1,2,8", help="recorded calls to show (from 1: call 0 has no previous)")
    args = parser.parse_args()
    opener = gzip.open if args.path.endswith(".gz") else open
    with opener(args.path, "rt") as f:
        data = json.load(f)
    print("| hdim | batch | cache | call | tiles a CTA | CTAs | main loop µs, med (min-max) | 1st K stage after wait, "
          "med (max) | end after previous end, med (max) |")
    print("| --- " * 9 + "|")
    for res in data["results"]:
        for call in (int(c) for c in args.calls.split(",")):
            recs, prev_end = res["records"][call], max(r["end"] for r in res["records"][call - 1])
            for tiles in sorted({r["tiles"] for r in recs}):
                rs = [r for r in recs if r["tiles"] == tiles]
                loop = [(r["last"] - r["first"]) / 1e3 for r in rs]
                first = [(r["first"] - r["waited"]) / 1e3 for r in rs]
                end = [(r["end"] - prev_end) / 1e3 for r in rs]
                med = statistics.median
                print(f"| {res['hdim']} | {res['batch']} | {res['cache'] // 1024}k | {call} | {tiles} | {len(rs)} | "
                      f"{med(loop):.1f} ({min(loop):.1f}-{max(loop):.1f}) | {med(first):.2f} ({max(first):.2f}) | "
                      f"{med(end):.1f} ({max(end):.1f}) |")


if __name__ == "__main__":
    main()
