"""pytest plugin for a host with several GPUs: each pytest-xdist worker sees one GPU (worker N gets GPU
N mod the count), so `pytest -n 8 -p gpu_pin tests/gpu` spreads the suite over every GPU. CUDA starts
lazily, so setting CUDA_VISIBLE_DEVICES before the first test touches the device is enough."""

import os


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("GPU_PIN_COUNT", "1"))
    if worker.startswith("gw") and count > 1:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(int(worker[2:]) % count)


if __name__ == "__main__":  # a pytest plugin, not a script: run directly, it says how it is used
    print("usage: GPU_PIN_COUNT=N python3 -m pytest -n WORKERS -p gpu_pin tests/gpu   (this folder on PYTHONPATH)\n")
    print(__doc__)
