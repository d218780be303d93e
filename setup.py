"""Package layout only; everything else is in pyproject.toml.

The source tree keeps its places at the top (protocol/, gateway/, store/, client/) while users get one namespace:
each place installs as a subpackage of ``millrace`` (``millrace.store``, ...), through ``package_dir``,
which pyproject.toml alone cannot derive for nested packages.
"""

from setuptools import find_packages, setup

PLACES = ("protocol", "gateway", "store", "client")

packages = ["millrace"] + [f"millrace.{name}" for name in find_packages(include=[f"{p}*" for p in PLACES])]
package_dir = {"millrace": "millrace", **{f"millrace.{place}": place for place in PLACES}}

setup(packages=packages, package_dir=package_dir)
