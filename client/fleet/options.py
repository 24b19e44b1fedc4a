"""The network options every tool that talks to the fleet shares (`client.run`, `client.estimate`):
defined once here, turned into the wire layer's NetworkOptions by `network_from`."""

from __future__ import annotations

import argparse

from client.wire.connect import NetworkOptions


def add_network_options(group: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    group.add_argument("--ca-bundle", metavar="FILE",
                       help="trust the CA certificates in this PEM file for https endpoints, instead of the "
                            "system's (which $SSL_CERT_FILE / $SSL_CERT_DIR may also point elsewhere)")
    group.add_argument("--insecure", action="store_true",
                       help="do not verify the TLS certificates of https endpoints (a warning is printed)")
    group.add_argument("--proxy", metavar="URL|none",
                       help="send every request, to every endpoint, through this http:// proxy (https "
                            "endpoints via CONNECT); 'none' to use no proxy. Default: $HTTPS_PROXY / "
                            "$HTTP_PROXY / $ALL_PROXY except hosts in $NO_PROXY; 127.0.0.1 and localhost "
                            "never go through a proxy from the environment")


def network_from(args: argparse.Namespace) -> NetworkOptions:
    return NetworkOptions(ca_bundle=args.ca_bundle, insecure=args.insecure, proxy=args.proxy)
