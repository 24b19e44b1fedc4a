"""One module for each kind of server the client knows (a `ServerProfile` named PROFILE); client.fleet.kinds
registers them. A new kind is one module here and one line there."""
