"""The bottom layer: records, the error tree (the one place that maps library errors), the request payload, ids,
run counters and the event loop. Imports nothing else of the client.
"""
