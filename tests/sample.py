"""A small workspace several test modules search: people, a deploy failure, a plan."""

NOTES = {
    "MEMORY.md": (
        "# Memory\n"
        "- Dana Whitfield starts every morning with a flat white, no sugar.\n"
        "- The ledger service stays on PostgreSQL 15 until pgvector 0.8 ships.\n"
    ),
    "memory/2026-05-14.md": "".join(f"line {i}: deploy log entry number {i}\n" for i in range(1, 11))
    + "- The deploy failed with ERR_SSL_PROTOCOL_ERROR because the load balancer certificate expired.\n",
    "memory/2026-05-15.md": (
        "# 2026-05-15\n- Priya wants offline mode for the mobile app in Q1.\n- Marco is the on-call SRE this quarter.\n"
    ),
}
