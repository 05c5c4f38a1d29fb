"""The flagperf_preload callback: enabled by ansible.cfg, it loads the filter and test plugins
in the process that calls it (ansible-playbook's main one), so that forked workers inherit
them."""

import configparser
import json
import re
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""\
    import json, sys
    from ansible.plugins.loader import callback_loader, init_plugin_loader
    init_plugin_loader()
    def plugins():
        return {name for name in sys.modules
                if name.startswith(("ansible.plugins.filter.", "ansible.plugins.test.",
                                    "ansible_collections.flagperf.benchmark.plugins.filter."))}
    before = plugins()
    callback_loader.get("flagperf_preload").v2_playbook_on_play_start(None)
    print(json.dumps({"before": sorted(before), "after": sorted(plugins())}))
""")


def test_ansible_cfg_enables_it(project):
    config = configparser.ConfigParser()
    config.read(project / "ansible.cfg")
    enabled = [name.strip() for name in config["defaults"]["callbacks_enabled"].split(",")]
    assert "flagperf_preload" in enabled


def test_a_play_start_loads_the_filters_and_tests(project, venv_env):
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=project, capture_output=True, text=True,
                          env={**venv_env, "ANSIBLE_CONFIG": str(project / "ansible.cfg")}, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    modules = json.loads(done.stdout.splitlines()[-1])
    # ansible-core names a plugin file's module after its path's hash: NAME_<digits>.
    loaded = {re.sub(r"_\d+$", "", name) for name in set(modules["after"]) - set(modules["before"])}
    # The project's filters (plugins/filter/flagperf.py, by the filter_plugins path and by the
    # collection's name) and ansible-core's own.
    assert {"ansible.plugins.filter.flagperf", "ansible_collections.flagperf.benchmark.plugins.filter.flagperf",
            "ansible.plugins.filter.core", "ansible.plugins.test.core"} <= loaded
