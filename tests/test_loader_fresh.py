"""loader: a rebuilt extension loads fresh in the same process, and the stale copy is never served
(issue 17). With a real (tiny) extension compiled by the host compiler, as the link edge leaves
one: a new file renamed over the old (`mv -f $out.tmp $out`). No CUDA, no GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import types
from pathlib import Path

import pytest

from flashbuild.pipeline import builder, loader

NAME = "_flashbuild_loadertest"
SOURCE = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static long calls = 0;  /* state of this copy of the extension */
static PyObject* build(PyObject* self, PyObject* args) { return PyLong_FromLong(BUILD); }
static PyObject* count(PyObject* self, PyObject* args) { return PyLong_FromLong(++calls); }
static PyMethodDef methods[] = {{"build", build, METH_NOARGS, "which build this is"},
                                {"count", count, METH_NOARGS, "calls so far, in this copy"},
                                {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "%(name)s", NULL, -1, methods};
PyMODINIT_FUNC PyInit_%(name)s(void) { return PyModule_Create(&def); }
""" % {"name": NAME}

CC = shutil.which("cc") or shutil.which("gcc")
PYTHON_H = Path(sysconfig.get_paths()["include"]) / "Python.h"
needs_cc = pytest.mark.skipif(CC is None or not PYTHON_H.is_file(), reason="no C compiler or Python headers")


def link(build_dir: Path, build: int) -> Path:
    """Build `build` of the extension into build_dir/NAME.so the way the link edge does: to a
    temporary name, then renamed over the old file."""
    source = build_dir / "ext.c"
    source.write_text(SOURCE)
    out = build_dir / f"{NAME}.so"
    subprocess.run([CC, "-shared", "-fPIC", f"-DBUILD={build}", f"-I{PYTHON_H.parent}", str(source), "-o",
                    f"{out}.tmp"], check=True)
    os.replace(f"{out}.tmp", out)
    return out


def relink_same_bytes(path: Path) -> None:
    shutil.copyfile(path, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)


@pytest.fixture
def build_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "_loaded", {})
    directory = tmp_path / "build"
    directory.mkdir(mode=0o700)
    yield directory
    for name in [n for n in sys.modules if n.startswith(NAME)]:
        del sys.modules[name]


@needs_cc
def test_an_unchanged_extension_is_the_module_already_loaded(build_dir):
    path = link(build_dir, 1)
    first = loader.load_extension(path, NAME)
    assert first.build() == 1 and first.__name__ == NAME and sys.modules[NAME] is first
    assert loader.load_extension(path, NAME) is first
    assert sorted(p.name for p in build_dir.glob("*.so")) == [f"{NAME}.so"]  # no copy of a first load


@needs_cc
def test_a_rebuilt_extension_loads_fresh_in_the_same_process(build_dir):
    path = link(build_dir, 1)
    first = loader.load_extension(path, NAME)
    assert first.count() == 1
    link(build_dir, 2)
    second = builder.import_extension(path, NAME)  # checked, then loaded: what load() and watch do
    assert second is not first and second.build() == 2
    assert second.count() == 1 and first.count() == 2  # two copies, each with its own state
    digest = loader.digest_of(path)
    assert second.__name__ == f"{NAME}_{digest[:8]}"  # a module name (and ops namespace) per build
    assert Path(second.__file__).name == f"{NAME}.{digest[:16]}.so"  # loaded from a file of its own
    assert sys.modules[NAME] is second and sys.modules[second.__name__] is second  # the name gets the current build
    assert loader.load_extension(path, NAME) is second
    assert first.build() == 1  # a module held from before keeps its own code


@needs_cc
def test_each_rebuild_loads_fresh_and_old_copies_are_removed(build_dir, monkeypatch):
    monkeypatch.setattr(loader, "SNAPSHOT_MAX_AGE", -1.0)
    path = link(build_dir, 1)
    loader.load_extension(path, NAME)
    for build in (2, 3, 4):
        link(build_dir, build)
        assert loader.load_extension(path, NAME).build() == build
    copies = sorted(p.name for p in build_dir.glob(f"{NAME}.*.so"))
    assert copies == [f"{NAME}.{loader.digest_of(path)[:16]}.so"]  # the current build's copy only
    assert not list(build_dir.glob(".*.load"))


@needs_cc
def test_the_copy_of_a_rebuilt_extension_is_counted_once_in_the_cache_listing(build_dir):
    from flashbuild.pipeline import cache

    path = link(build_dir, 1)
    loader.load_extension(path, NAME)
    link(build_dir, 2)
    loader.load_extension(path, NAME)  # the copy is a hard link of the new file
    assert len(list(build_dir.glob("*.so"))) == 2
    assert cache._size(build_dir) == sum(p.stat().st_size for p in build_dir.iterdir() if p.name != f"{NAME}.so")


@needs_cc
def test_a_relink_to_the_same_bytes_is_the_module_already_loaded(build_dir):
    path = link(build_dir, 1)
    first = loader.load_extension(path, NAME)
    relink_same_bytes(path)  # a touched header whose objects compile the same
    assert loader.load_extension(path, NAME) is first
    link(build_dir, 2)
    second = loader.load_extension(path, NAME)
    link(build_dir, 1)  # the edit undone: the bytes of the first build again
    assert loader.load_extension(path, NAME) is first and sys.modules[NAME] is first
    assert second.build() == 2


@needs_cc
def test_the_drop_in_api_wraps_a_rebuilt_extension_in_ops_of_its_own(build_dir):
    from flashbuild import api

    path = link(build_dir, 1)
    first = api.wrap(loader.load_extension(path, NAME))
    link(build_dir, 2)
    second = api.wrap(loader.load_extension(path, NAME))
    assert first.namespace == NAME and second.namespace == second.ext.__name__ != NAME
    assert second.ext.build() == 2 and first.ext.build() == 1


# The binding's shape: PYBIND11_MODULE (pybind11 3 keeps one module per spec name for the life of the
# process), an exception class registered on the module and a translator to flashbuild's error.
PYBIND11_SOURCE = """\
#include <pybind11/pybind11.h>
#include <stdexcept>
namespace py = pybind11;
namespace flashbuild { struct VariantNotBuilt : std::runtime_error { using std::runtime_error::runtime_error; }; }
PYBIND11_MODULE(%(name)s, m) {
  static py::exception<flashbuild::VariantNotBuilt> fallback(m, "VariantNotBuiltError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
    } catch (const flashbuild::VariantNotBuilt& err) {
      PyErr_SetString(py::module_::import("flashbuild.errors").attr("VariantNotBuiltError").ptr(), err.what());
    }
  });
  m.def("build", []() { return BUILD; });
  m.def("refuse", []() { throw flashbuild::VariantNotBuilt("not in build " + std::to_string(BUILD)); });
}
""" % {"name": NAME}


def pybind11_include() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    for base in ([Path(p) / "include" for p in spec.submodule_search_locations] if spec else []):
        if (base / "pybind11" / "pybind11.h").is_file():
            return base
    return None


CXX = shutil.which("c++") or shutil.which("g++")


@pytest.mark.skipif(CXX is None or pybind11_include() is None or not PYTHON_H.is_file(),
                    reason="no C++ compiler, pybind11 headers (torch's) or Python headers")
def test_a_rebuilt_pybind11_extension_loads_fresh_under_a_spec_name_of_its_own(build_dir):
    """pybind11 3's module cache answers a second load of the same spec name with the first module,
    whatever the file: a rebuilt binding must be loaded under a spec name of its own."""
    from flashbuild.errors import VariantNotBuiltError

    source = build_dir / "ext.cpp"
    source.write_text(PYBIND11_SOURCE)
    out = build_dir / f"{NAME}.so"

    def link_pybind11(build: int) -> None:
        subprocess.run([CXX, "-O0", "-shared", "-fPIC", "-fvisibility=hidden", "-std=c++17", f"-DBUILD={build}",
                        f"-I{pybind11_include()}", f"-I{PYTHON_H.parent}", str(source), "-o", f"{out}.tmp"], check=True)
        os.replace(f"{out}.tmp", out)

    link_pybind11(1)
    first = loader.load_extension(out, NAME)
    link_pybind11(2)
    second = loader.load_extension(out, NAME)
    assert second is not first and (first.build(), second.build()) == (1, 2)
    assert second.__name__ == f"{NAME}_{loader.digest_of(out)[:8]}"
    with pytest.raises(VariantNotBuiltError, match="not in build 2"):
        second.refuse()
    with pytest.raises(VariantNotBuiltError, match="not in build 1"):
        first.refuse()


def test_a_rebuilt_extension_of_a_tree_package_is_refused_not_served_stale(tmp_path, monkeypatch):
    """fresh=False (an upstream tree's package imports its extension by name, once): ImportError."""
    path = (tmp_path / "flash_attn_2_cuda.so").resolve()
    path.write_bytes(b"first build")
    module = types.ModuleType("flash_attn_2_cuda")
    monkeypatch.setattr(loader, "_loaded", {path: loader.Loaded(loader.fingerprint(path), "d1", {"d1": module},
                                                                 module)})
    assert loader.load_extension(path, "flash_attn_2_cuda", fresh=False) is module
    new = path.with_suffix(".so.tmp")
    new.write_bytes(b"second build, longer")
    os.replace(new, path)  # as the link edge does: mv -f $out.tmp $out
    with pytest.raises(ImportError, match="was rebuilt after this process loaded it .* new process"):
        loader.load_extension(path, "flash_attn_2_cuda", fresh=False)


def test_a_second_build_of_a_tree_package_is_refused_not_served_as_the_first(tmp_path, monkeypatch):
    """fresh=False and another path already loaded under the module's name (two slices of one tree in one
    process, say FA3 with and without its cluster kernels): ImportError naming both, before anything loads. Loaded,
    pybind11 would hand back the first build's module (the wrong kernels) and flash-attn 3's _C would register
    torch.ops.flash_attn_3 twice, which aborts the process."""
    first = (tmp_path / "a" / "_C.so").resolve()
    second = (tmp_path / "b" / "_C.so").resolve()
    for path in (first, second):
        path.parent.mkdir()
        path.write_bytes(b"a build")
    module = types.ModuleType("_C")  # the flash-attn-3 profile's extension name
    monkeypatch.setattr(loader, "_loaded", {first: loader.Loaded(loader.fingerprint(first), "d1", {"d1": module},
                                                                  module)})
    monkeypatch.setattr(loader, "_exec", lambda *a, **k: pytest.fail("loaded a second build of _C"))
    with pytest.raises(ImportError, match=f"{second} is another build of _C.*already loaded {first}"
                                          ".* new process"):
        loader.load_extension(second, "_C", fresh=False)
    assert loader.load_extension(first, "_C", fresh=False) is module  # the loaded one still loads
