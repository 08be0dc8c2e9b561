"""pylmq's configuration: ``etc/vm.args`` and ``etc/app.config`` read into one :class:`Settings`.

See ``etc/app.config`` for the keys pylmq reads and how they map.
"""

from pylmq.config.consult import Atom, ImproperList, Term, parse_terms
from pylmq.config.lager import LAGER_LEVELS, LagerConfig, LogHandler, RotationSpec, levels_for, parse_date_spec
from pylmq.config.settings import FsyncPolicy, Settings, StoreKind, load_settings, read_cookie_file
from pylmq.config.vmargs import NameMode, VmArgs, parse_vm_args, split_vm_args

__all__ = [
    "LAGER_LEVELS",
    "Atom",
    "FsyncPolicy",
    "ImproperList",
    "LagerConfig",
    "LogHandler",
    "NameMode",
    "RotationSpec",
    "Settings",
    "StoreKind",
    "Term",
    "VmArgs",
    "levels_for",
    "load_settings",
    "parse_date_spec",
    "parse_terms",
    "parse_vm_args",
    "read_cookie_file",
    "split_vm_args",
]
