"""Writes queries.jsonl: questions about things absent from each workspace (see bench/abstention.py). Each
question lists `absentTerms`, words that must not occur in its workspace; this script checks them first.

    python3 bench/abstention/make_set.py [SHARED_BENCH]    # default ../shared/bench, from the checkout

`workspace` is relative to this folder (the example workspace); `sharedWorkspace` to the shared bench folder
(locomo-dev), whose place relative to a checkout differs between the main one and worktrees."""

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCOMO = "locomo-dev/workspaces"
EXAMPLE = "../../examples/workspace"

OFFTOPIC = [  # about an agent's technical work, absent from every chat workspace
    ("Why did PR #17 fail in CI?", ["pr", "ci"]),
    ("What did we decide about the ERR_SSL_PROTOCOL error?", ["err_ssl_protocol", "ssl"]),
    ("Which Kubernetes version runs in the production cluster?", ["kubernetes"]),
    ("What is the password of the staging database?", ["staging"]),
    ("Who is on call for the ledger service this week?", ["ledger"]),
    ("What was the root cause of the replication lag incident?", ["replication"]),
    ("Which LaunchDarkly flags are hard-coded in the mobile client?", ["launchdarkly"]),
    ("What is the retry policy of the payment gateway webhook?", ["webhook"]),
]
NAMED = {  # a person of the conversation, with something the conversation never mentions
    "conv-26": [
        ("What cryptocurrency did Caroline invest in?", ["cryptocurrency", "crypto", "bitcoin"]),
        ("When did Melanie get her pilot's licence?", ["pilot", "licence", "license"]),
        ("Which programming language is Caroline learning?", ["programming", "python", "javascript"]),
    ],
    "conv-30": [
        ("What cryptocurrency did Gina invest in?", ["cryptocurrency", "crypto", "bitcoin"]),
        ("When did Jon get his pilot's licence?", ["pilot", "licence", "license"]),
        ("Which programming language is Jon learning?", ["programming", "python", "javascript"]),
    ],
    "conv-41": [
        ("What cryptocurrency did Maria invest in?", ["cryptocurrency", "crypto", "bitcoin"]),
        ("When did John get his pilot's licence?", ["pilot", "licence", "license"]),
        ("Which programming language is Maria learning?", ["programming", "python", "javascript"]),
    ],
    "conv-42": [
        ("What cryptocurrency did Joanna invest in?", ["cryptocurrency", "crypto", "bitcoin"]),
        ("When did Nate get his pilot's licence?", ["pilot", "licence", "license"]),
        ("Which programming language is Joanna learning?", ["programming", "python", "javascript"]),
    ],
    "conv-43": [
        ("What cryptocurrency did Tim invest in?", ["cryptocurrency", "crypto", "bitcoin"]),
        ("When did John get his pilot's licence?", ["pilot", "licence", "license"]),
        ("Which programming language is Tim learning?", ["programming", "python", "javascript"]),
    ],
}
EXAMPLE_QUESTIONS = [  # the example agent's memory: engineering notes, no private life beyond Dana's coffee
    ("What did Caroline paint at the art class?", ["caroline", "paint"]),
    ("Which camping trip did Melanie take with her kids?", ["camping", "melanie"]),
    ("What is the name of Maria's puppy?", ["maria", "puppy"]),
    ("Which Kubernetes version runs in the production cluster?", ["kubernetes"]),
    ("What did the team decide about GraphQL federation?", ["graphql", "federation"]),
    ("Why did PR #42 get reverted?", ["42", "reverted"]),
    ("What is Priya's favourite football team?", ["football"]),
    ("When is Marco's wedding?", ["wedding"]),
]


def words(folder: Path) -> set[str]:
    return {w for f in folder.rglob("*.md") for w in re.findall(r"\w+", f.read_text().lower())}


def main() -> None:
    shared = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/bench").resolve()
    rows = []
    for conv, named in NAMED.items():
        ws = ("sharedWorkspace", f"{LOCOMO}/{conv}")
        rows += [(ws, "absent-offtopic", q, t) for q, t in OFFTOPIC] + [(ws, "absent-named", q, t) for q, t in named]
    rows += [(("workspace", EXAMPLE), "absent-example", q, t) for q, t in EXAMPLE_QUESTIONS]
    with (HERE / "queries.jsonl").open("w") as out:
        for n, ((key, ws), category, query, terms) in enumerate(rows):
            folder = (shared if key == "sharedWorkspace" else HERE) / ws
            if not folder.is_dir():
                raise SystemExit(f"{folder}: no such workspace")
            present = words(folder) & set(terms)
            if present:
                raise SystemExit(f"{query!r}: {sorted(present)} occur in {ws}")
            q = {"qid": f"absent-{n:03d}", "query": query, key: ws, "category": category, "relevant": []}
            out.write(json.dumps(q | {"absentTerms": terms}) + "\n")
    print(f"wrote {len(rows)} questions")


if __name__ == "__main__":
    main()
