"""Run the first example of docs/sdk.md against a real ``tay serve``."""

import re
import subprocess
import sys

from .server import REPO


def test_first_docs_example_runs_and_prints_the_result(tay_server):
    text = (REPO / "docs" / "sdk.md").read_text()
    example = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    program = f"SOCKET_PATH = {tay_server.socket_path!r}\n" + example
    completed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                               cwd=str(REPO), env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "{'sum': 7}"
