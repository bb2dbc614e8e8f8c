"""`pip install ./python` from a copy of the package (issue 14: the package installs and, on a
machine without torch or a GPU, imports and says why nothing can launch). Standard library only;
pip fetches the build backend (setuptools, pyproject.toml's build-system) from the package index
as any user's install does.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Install(unittest.TestCase):
    def test_pip_install_then_import_outside_the_source_tree(self):
        with tempfile.TemporaryDirectory() as tmp:
            # A copy, so pip's in-tree build files never land in the checkout.
            src = shutil.copytree(PACKAGE, os.path.join(tmp, "src"), ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
            site = os.path.join(tmp, "site")
            pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--target", site, src], capture_output=True, text=True)
            self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)
            self.assertTrue(os.path.isfile(os.path.join(site, "tilec_torch", "__init__.py")))
            # Import from the installed copy only (cwd outside the checkout, no PYTHONPATH entry
            # to its source); other entries stay, so torch is found wherever it was found here.
            env = dict(os.environ)
            keep = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.realpath(p) != os.path.realpath(PACKAGE)]
            env["PYTHONPATH"] = os.pathsep.join([site, *keep])
            code = "import tilec_torch, os; print(os.path.dirname(tilec_torch.__file__)); print(tilec_torch.gpu_status())"
            run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp, env=env)
            self.assertEqual(run.returncode, 0, run.stderr)
            where, status = run.stdout.splitlines()
            self.assertEqual(os.path.realpath(where), os.path.realpath(os.path.join(site, "tilec_torch")))
            try:
                import torch  # noqa: F401
                has_torch = True
            except ImportError:
                has_torch = False
            if not has_torch:
                # No torch here (CI): the status names the reason instead of "ok".
                self.assertEqual(status, "torch is not installed")
            else:
                # The installed copy reports what the checkout's reports on this machine.
                sys.path.insert(0, PACKAGE)
                import tilec_torch
                self.assertEqual(status, tilec_torch.gpu_status())


if __name__ == "__main__":
    unittest.main()
