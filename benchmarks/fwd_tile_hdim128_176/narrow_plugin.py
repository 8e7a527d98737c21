"""A pytest plugin that runs GPU test modules on one build: every collected module's SELECTION (what its `m`
fixture loads) becomes NARROW_SELECTION (JSON), and the cases parametrized with a head_dim other than
NARROW_HDIM (one head dim, or several comma-separated) are deselected. So tests/gpu/test_hopper_varlen_gpu.py and
test_kvcache_prefill_gpu.py run their hdim-128 cases on this study's build instead of building every head dim they
cover (run.sh):

    NARROW_HDIM=128 NARROW_SELECTION='{"hdim": 128, ...}' PYTHONPATH=benchmarks/fwd_tile_hdim128_176:$PYTHONPATH \\
        python3 -m pytest -p narrow_plugin tests/gpu/test_hopper_varlen_gpu.py
"""
from __future__ import annotations

import json
import os


def pytest_collection_modifyitems(config, items):
    hdims = {int(h) for h in os.environ["NARROW_HDIM"].split(",")}
    selection = json.loads(os.environ["NARROW_SELECTION"])
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        (keep if params.get("head_dim", next(iter(hdims))) in hdims else drop).append(item)
        if hasattr(item.module, "SELECTION"):
            item.module.SELECTION = selection
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


if __name__ == "__main__":  # a plugin, not a script: --help (tests/test_benchmark_scripts.py) prints how to use it
    print(__doc__)
