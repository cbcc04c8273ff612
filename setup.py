"""Package layout of the wheel (everything else is in pyproject.toml).

Why a setup.py: the wheel must ship the RTL sources (``rtl/``: Verilog, its cocotb test benches,
the generated ISA header) and the sweep examples (``examples/``) so that ``archsim cosim`` and
the documented sweeps work from an installed package. They stay top-level directories of the
repository, so they are mapped into the ``archsim`` package as ``archsim.rtl`` and
``archsim.examples`` (``package_dir``), which pyproject's ``packages.find`` cannot express.
``archsim.cosim`` finds the RTL in a checkout (``rtl/``) or installed (``archsim/rtl``).
"""
from setuptools import find_namespace_packages, setup

MAPPED = {"archsim.rtl": "rtl", "archsim.rtl.tests": "rtl/tests",
          "archsim.rtl.generated": "rtl/generated", "archsim.examples": "examples"}

setup(
    # namespace packages too: data-only directories such as archsim/presets and workloads/data
    packages=find_namespace_packages(include=["archsim*", "isa*", "mapping*", "workloads*"],
                                     exclude=["*.__pycache__"]) + list(MAPPED),
    package_dir=MAPPED,
    package_data={
        "": ["*.yaml", "*.json", "*.md"],
        "archsim.rtl": ["*.v", "*.md"],
        "archsim.rtl.tests": ["*.py"],
        "archsim.rtl.generated": ["*.vh"],
        "archsim.examples": ["*.yaml"],
        "archsim.cosim": ["*.cpp"],          # Verilator's main, once archsim.cosim is a package
    },
    exclude_package_data={"archsim.rtl": ["sim_build/*"]},
)
