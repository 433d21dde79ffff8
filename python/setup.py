"""The package's one build step beyond pyproject.toml's: the front end must be in it.

attnscope's notebook views are an ES module and the engine's wasm (``attnscope/static/``), built
from this repository by ``make wheel`` (Rust for the wasm, Node for the module), not by pip. A
build from a source tree that lacks them stops here, at install time, with the command to run,
rather than installing a package whose every view raises.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).parent
#: What python/js/build.mjs makes: the front end and the wasm, and MathJax for the nbconvert template.
FRONT_END = ("attnscope/static/widget.js", "attnscope/static/attnscope_bg.wasm", "share/templates/attnscope/mathjax.js")


class BuildWithFrontEnd(build_py):
    def run(self):
        missing = [f for f in FRONT_END if not (HERE / f).is_file()]
        if missing:
            raise SystemExit(
                f"attnscope: {', '.join(str(HERE / f) for f in missing)} missing: the notebook's front end "
                "is built from the attnscope repository, not by pip. In the repository run `make wheel` "
                "(scripts/setup.sh installs Rust and Node), then `pip install target/wheels/attnscope-*.whl`."
            )
        super().run()


setup(cmdclass={"build_py": BuildWithFrontEnd})
