"""Outbound connections to addresses that users typed in: the SSRF policy and its resolver.

Workers call job targets and the reaper calls tenants' alert webhooks; both are URLs from outside
the operator's trust, reached from inside the operator's network, so both go through the same
policy (``ssrf``, pure) and the same pinning resolver (``resolver``, aiohttp).
"""
