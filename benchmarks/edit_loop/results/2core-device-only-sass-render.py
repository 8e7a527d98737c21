import sys
from pathlib import Path
from flashbuild.pipeline import render
from flashbuild.selection.variants import select
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
for kw in (dict(hdim="32,96,128,192,256", causal="both", features=[]), dict(hdim="64", causal="on", features=["local", "softcap"])):
    sel = select(dtype="fp16", arch="sm90", direction="fwd", **kw)
    for name, text in render.render_texts(sel, build_key="k").items():
        (out / name).write_text(text)
