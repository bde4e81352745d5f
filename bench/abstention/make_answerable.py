"""Writes the answerable half of the abstention check: four tiny hand-written workspaces (answerable/*) and
answerable.jsonl, questions that the notes answer in other words than the question's (a paraphrase: "what
do we run the ledger's database on" over "we keep PostgreSQL 15 for the ledger service"), over those and
over examples/workspace. A calibration that abstains on them fails the agent that asks (bench/abstention.py
reports the share answered with the right note among the hits at the floor).

    python3 bench/abstention/make_answerable.py

Each question names the line that answers it by a snippet of it; this script checks that the snippet occurs
exactly once in the workspace and writes its path and line number. `workspace` is relative to this folder.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from labels import line_of  # noqa: E402

EXAMPLE = "../../examples/workspace"

WORKSPACES = {
    "answerable/homelab": {
        "MEMORY.md": """# MEMORY

## Setup
- The NAS is a Synology DS920+ with four 8 TB drives in SHR-1.
- Backups go to Backblaze B2 every night at 02:00 through Hyper Backup.
- The router is an OPNsense box; the guest Wi-Fi is on VLAN 30.

## Preferences
- Keep every container pinned to a version tag, never `latest`.
""",
        "memory/2026-09-14.md": """# 2026-09-14

## Jellyfin
- Moved Jellyfin from the NAS to the mini PC: the NAS CPU could not transcode 4K.
- Hardware transcoding works with the Intel iGPU once /dev/dri is passed to the container.

## Power
- The UPS gives 25 minutes at the current load; NUT shuts the NAS down at 20% battery.
""",
        "memory/2026-10-03.md": """# 2026-10-03

## Certificates
- Caddy renews the certificates for every internal name through the DNS challenge at Cloudflare.
- The Cloudflare token only has Zone:DNS:Edit on the home domain.

## Pi-hole
- Pi-hole blocks about 18% of lookups; the kids' tablets bypassed it until DoH was blocked at the router.
""",
    },
    "answerable/travel": {
        "memory/2026-05-02.md": """# 2026-05-02

## Lisbon trip
- Flights booked: TAP from Amsterdam on 12 June, back on 19 June; seats 14A and 14B.
- The apartment is in Alfama, two streets above the Feira da Ladra; check-in after 15:00.
- Sam wants a day trip to Sintra; tickets for Pena Palace must be bought online for a time slot.
""",
        "memory/2026-05-20.md": """# 2026-05-20

## Before leaving
- Passports checked: Sam's expires in November, fine for Portugal.
- Travel insurance renewed with the annual family policy.
- The neighbour, Ilse, will water the plants and feed the cat on Tuesday and Friday.
""",
        "memory/2026-06-15.md": """# 2026-06-15

## In Lisbon
- Dinner at Taberna da Rua das Flores: no reservations, we queued 40 minutes and it was worth it.
- Tram 28 was packed; walking from Graça down to Baixa was quicker.
- Sam got sunburnt at Cascais; bought factor 50 at the pharmacy.
""",
    },
    "answerable/research": {
        "MEMORY.md": """# MEMORY

## Thesis
- Topic: retrieval for long conversational memory; supervisor Prof. Okafor, meets every second Wednesday.
- Submission deadline for the workshop paper: 14 February.
""",
        "memory/2026-11-03.md": """# 2026-11-03

## Experiments
- The reranker run on 4 A100s took 11 hours; the cluster queue was the bottleneck, not the GPUs.
- Learning rate 3e-5 diverged after 2k steps; 1e-5 with warmup of 500 steps is stable.
- Results go in the shared sheet "runs-2026", one row per seed.
""",
        "memory/2026-11-17.md": """# 2026-11-17

## Reading group
- Presented the ColBERTv2 paper; the residual compression section raised most questions.
- Next session Lena presents SPLADE; I owe her my notes on the regularisation.

## Admin
- The conference travel grant was approved: 1,200 euros, receipts due within 30 days.
""",
    },
    "answerable/household": {
        "MEMORY.md": """# MEMORY

## Family
- Noor has football practice on Mondays and Thursdays at 17:30; the kit bag stays in the car.
- Yusuf is allergic to peanuts; the school has his EpiPen.
- Biscuit, the dog, gets half a cup of kibble twice a day and no chicken bones.
""",
        "memory/2026-11-09.md": """# 2026-11-09

## House
- The boiler was serviced; the engineer said the pressure should sit between 1 and 1.5 bar.
- Council tax is paid by direct debit on the 1st; the water bill is quarterly.
- The spare key is with Mrs Patel at number 12.
""",
        "memory/2026-11-21.md": """# 2026-11-21

## Plans
- Grandma's 80th birthday on 6 December: lunch at the Italian place, table for 11 booked.
- Present: a framed print of the old family house, ordered, arrives on 2 December.
""",
    },
}

QUESTIONS = [  # (workspace, question, snippet of the line that answers it)
    ("answerable/homelab", "where are the nightly copies of my files stored offsite", "Backups go to Backblaze"),
    ("answerable/homelab", "how many disks are in the storage box", "four 8 TB drives"),
    ("answerable/homelab", "why did the movie server move to another machine", "Moved Jellyfin from the NAS"),
    ("answerable/homelab", "how long can the house run on battery during an outage", "The UPS gives 25 minutes"),
    ("answerable/homelab", "what handles https renewal for my internal sites", "Caddy renews the certificates"),
    ("answerable/homelab", "which network are visitors on", "the guest Wi-Fi is on VLAN 30"),
    ("answerable/homelab", "how do the children get around the ad filter", "the kids' tablets bypassed it"),
    ("answerable/homelab", "should images use the newest tag", "never `latest`"),
    ("answerable/travel", "when do we fly to Portugal and when do we come home", "Flights booked: TAP"),
    ("answerable/travel", "which part of town is our rental in", "The apartment is in Alfama"),
    ("answerable/travel", "who looks after the pets while we are away", "Ilse, will water the plants"),
    ("answerable/travel", "is anyone's travel document about to run out", "Passports checked"),
    ("answerable/travel", "do we need to reserve the castle visit in advance", "tickets for Pena Palace"),
    ("answerable/travel", "how long did we wait for a table at that restaurant", "we queued 40 minutes"),
    ("answerable/travel", "what happened at the beach", "Sam got sunburnt at Cascais"),
    ("answerable/research", "who is my advisor and how often do we talk", "supervisor Prof. Okafor"),
    ("answerable/research", "when is the paper due", "Submission deadline for the workshop paper"),
    ("answerable/research", "what slowed down the training job", "the cluster queue was the bottleneck"),
    ("answerable/research", "which step size made training unstable", "Learning rate 3e-5 diverged"),
    ("answerable/research", "where do I record experiment outcomes", "Results go in the shared sheet"),
    ("answerable/research", "what article did I talk about at the reading club", "Presented the ColBERTv2 paper"),
    ("answerable/research", "how much money did I get for the trip to the conference", "travel grant was approved"),
    ("answerable/household", "what days does my daughter train", "Noor has football practice"),
    ("answerable/household", "what food must my son avoid", "Yusuf is allergic to peanuts"),
    ("answerable/household", "how much do we feed the puppy", "Biscuit, the dog"),
    ("answerable/household", "what should the heating gauge read", "the pressure should sit between"),
    ("answerable/household", "who has a copy of our front door key", "The spare key is with Mrs Patel"),
    ("answerable/household", "where are we celebrating granny's birthday", "Grandma's 80th birthday"),
    ("answerable/household", "what gift did we get for her", "a framed print of the old family house"),
    (EXAMPLE, "what database does the ledger run on", "we keep PostgreSQL 15 for the ledger"),
    (EXAMPLE, "who looked over the fix for the broken release", "Dana reviewed PR #17"),
    (EXAMPLE, "what coffee does Dana like", "Starts every morning with a flat white"),
    (EXAMPLE, "which sport is Dana preparing for", "training for a half marathon"),
    (EXAMPLE, "why was the replica behind", "Root cause: a missing index"),
    (EXAMPLE, "how do services write their logs now", "all new services log JSON to stdout"),
    (EXAMPLE, "how are edit clashes resolved when the phone syncs", "last-writer-wins per field"),
    (EXAMPLE, "who is paged when production breaks", "on-call SRE this quarter"),
    (EXAMPLE, "how should I format answers for the user", "command first, explanation after"),
]


def main() -> None:
    for ws, files in WORKSPACES.items():
        for name, text in files.items():
            path = HERE / ws / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    with (HERE / "answerable.jsonl").open("w") as out:
        for n, (ws, query, snippet) in enumerate(QUESTIONS):
            category = "answerable-example" if ws == EXAMPLE else "answerable-tiny"
            path, line = line_of(HERE / ws, snippet, query)
            row = {"qid": f"answerable-{n:03d}", "query": query, "workspace": ws, "category": category}
            out.write(json.dumps(row | {"relevant": [{"path": path, "line": line}]}) + "\n")
    print(f"wrote {len(QUESTIONS)} questions")


if __name__ == "__main__":
    main()
