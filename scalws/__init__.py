"""ScalWS: a web server with a Python control plane and a C/Cython data plane."""

__version__ = "0.1.0"
