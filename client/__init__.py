"""regen-swarm client: the streaming swarm that regenerates a prompt set on a fleet, and its offline tools."""
