"""Build hook: record the commit plan-runner is built from (runner/data/source.json), so `plan-runner init`
pins the workflow to exactly this code. Everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithSource(build_py):
    def run(self) -> None:
        super().run()
        import importlib.util
        import sys

        sys.path.insert(0, str(HERE))
        spec = importlib.util.spec_from_file_location("_plan_runner_source", HERE / "runner" / "adapters" / "source.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        target = Path(self.build_lib) / "runner" / "data" / "source.json"
        version = self.distribution.get_version()
        if not module.record_source(HERE, target, version):
            print("plan-runner: no clean git checkout here; `plan-runner init` will say it cannot pin a commit")


setup(cmdclass={"build_py": BuildPyWithSource})
