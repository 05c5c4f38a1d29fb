import sys

from flagperf_ansible.cli import main

sys.exit(main())
