import sys
from pathlib import Path
from flashbuild.pipeline import render
from flashbuild.selection.variants import select
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
sel = select(hdim="64,96,128,192,256", dtype="fp16", arch="sm90", direction="bwd", causal="both", features=[])
for name, text in render.render_texts(sel, build_key="k").items():
    (out / name).write_text(text)
