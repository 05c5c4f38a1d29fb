"""Configuration and validation: what a run is asked to do, checked before any host is touched.

The settings and inventory as Ansible reads them (``inventory``, ``settings``), the case specs
(``casespec``), the cases of every suite and their configuration files (``case_schema``,
``cases``, ``base_config``, ``inference_config``, ``suites``, ``launchers``), the vendors'
definitions and datasheets (``vendor``, ``datasheet``), and the one error users see
(``errors``). Imports nothing from ``run`` or ``results``.
"""
