import re, subprocess, sys, hashlib
CUO = "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/nvidia/cu13/bin/cuobjdump"
def functions(path):
    """Each kernel's SASS alone (cuobjdump -sass -fun), addresses stripped: name -> md5."""
    out = subprocess.run([CUO, "-sass", path], capture_output=True, text=True, check=True).stdout
    names = re.findall(r"Function : (\S+)", out)
    funcs = {}
    for name in names:
        text = subprocess.run([CUO, "-sass", "-fun", name, path], capture_output=True, text=True, check=True).stdout
        body = text[text.index("Function : "):]
        funcs[name] = hashlib.md5(re.sub(r"/\*[0-9a-f]{4,}\*/", "", body).encode()).hexdigest()[:12]
    return funcs
base = {}
for p in sys.argv[1].split(","): base.update(functions(p))
new = {}
for p in sys.argv[2].split(","): new.update(functions(p))
for n in sorted(set(base) | set(new)):
    short = re.sub(r"^_ZN10flashbuild", "", n)[:90]
    print(f"{short:<92} base {base.get(n, '-'):<12} new {new.get(n, '-'):<12} {'identical' if base.get(n) == new.get(n) else 'DIFFERENT'}")
