#!/usr/bin/python3
"""Print the site directory of this Python for pure-Python packages
installed under PREFIX (make install's PYTHON_SITE): Debian's python3
(scheme posix_local) reads PREFIX/lib/python3.X/dist-packages (for
/usr/local and /usr alike); other Pythons sysconfig's purelib of PREFIX.

Usage: python3 tools/scripts/python_site.py PREFIX"""
import sys
import sysconfig

prefix = sys.argv[1]
get_scheme = getattr(sysconfig, "get_default_scheme", None) or \
    sysconfig._get_default_scheme
if get_scheme() == "posix_local":
    print("%s/lib/python%d.%d/dist-packages" % (prefix, *sys.version_info[:2]))
else:
    print(sysconfig.get_path("purelib", vars={"base": prefix,
                                              "platbase": prefix}))
