"""What every tool that talks to the fleet shares (`client.run`, `client.estimate`): the network options,
defined once here and turned into the wire layer's NetworkOptions by `network_from`, and the FleetConfig
the tools build from their command lines."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from client.core.options import (
    DEFAULT_CIRCUIT_FAILURES,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_SLOTS,
)
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


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """Everything that says how to reach and use the fleet, checked once by the tool's command line;
    `open_fleet` (client.engine.session) takes it whole."""

    urls: tuple[str, ...]
    model: str | None = None
    api_key: str | None = None
    network: NetworkOptions = field(default_factory=NetworkOptions)
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    slots: int = DEFAULT_SLOTS
    wait_ready: float = 0.0
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S
    circuit_failures: int = DEFAULT_CIRCUIT_FAILURES
    compat: str = "auto"  # which extension fields go out (client.fleet.preflight)
    token_ids: str = "auto"  # client.fleet.token_ids
    continue_replies: bool = False  # replies on /generate from exact ids, a broken one continued (native_reply)
