"""Writes calibration TRAINING data for tiny workspaces (bench/train_calibration.py reads it; the held-out
check bench/abstention/ never does): ten tiny hand-written workspaces (tiny/*, a MEMORY.md and 2 daily
notes each, the memory of an agent that just started), tiny.jsonl, questions that the notes answer in other
words than the question's (a paraphrase: "what pain medicine can't I take" over "Allergic to ibuprofen"),
each labelled with the line that answers it, and offtopic.jsonl, questions in plain words about things none
of these workspaces holds (asked of each of them by train_calibration.py).

    python3 bench/calibration/make_tiny.py

Each question names the line that answers it by a snippet of it; this script checks that the snippet occurs
exactly once in the workspace and writes its path and line number. Each workspace also lists its people, so
that train_calibration.py can ask one workspace's questions of another with the names mapped (a known person
with something absent).
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from labels import line_of  # noqa: E402

WORKSPACES = {
    "tiny/platform-team": {
        "people": ["Ravi", "Mei"],
        "MEMORY.md": """# MEMORY

## Team
- Ravi leads the platform team; Mei owns the billing service and its on-call rota.
- Standup is at 09:45 in the #platform channel, async on Fridays.

## Conventions
- Every migration needs a rollback script checked in next to it.
- Feature flags live in LaunchDarkly; stale flags are removed after 30 days.
""",
        "memory/2026-10-06.md": """# 2026-10-06

## Incident
- The billing API returned 502s for 14 minutes after the load balancer certificate expired.
- Mei wrote the postmortem; action item: alert 21 days before any certificate expires.
""",
        "memory/2026-10-13.md": """# 2026-10-13

## Planning
- Q4 goal: move the job queue from RabbitMQ to SQS before the data centre lease ends in March.
- Ravi asked me to estimate the SQS move; I said six weeks with two engineers.
- Decided to keep Terraform state in S3 with DynamoDB locking.
""",
    },
    "tiny/health": {
        "people": ["Dr Alvarez", "Tom"],
        "MEMORY.md": """# MEMORY

## Health
- Allergic to ibuprofen: hives within an hour; paracetamol is fine.
- GP is Dr Alvarez at the Elm Street practice; repeat prescriptions are ordered through the app.
- Blood pressure target under 130/80; takes 5 mg amlodipine every morning.
""",
        "memory/2026-08-19.md": """# 2026-08-19

## Physio
- Left knee: patellar tendinopathy; physio says no running for four weeks, cycling is fine.
- Exercises: slow single-leg squats, 3 sets of 15, every second day.
""",
        "memory/2026-09-30.md": """# 2026-09-30

## Check-up
- Cholesterol came back at 5.8; Dr Alvarez wants a retest in three months before any statin.
- Flu jab booked for 12 October at the pharmacy; Tom gets his the same day.
""",
    },
    "tiny/finances": {
        "people": ["Hannah", "Greg"],
        "MEMORY.md": """# MEMORY

## Money
- Salary lands on the 25th; rent of 1,450 goes out on the 1st by standing order.
- Emergency fund target is six months of spending, kept in the Marcus easy-access account.
- Greg, the accountant, files the self-assessment; his deadline for our papers is 31 October.
""",
        "memory/2026-07-02.md": """# 2026-07-02

## Investing
- Moved the old workplace pension into the Vanguard SIPP; fees drop from 0.9% to 0.15%.
- Monthly 300 into a global index fund inside the stocks and shares ISA.
""",
        "memory/2026-09-12.md": """# 2026-09-12

## Bills
- Switched energy supplier to Octopus; the fixed tariff runs until September next year.
- Hannah and I split the car insurance 50/50; it renews on 3 January.
- Cancelled the gym membership that was still charging 42 a month.
""",
    },
    "tiny/rust-cli": {
        "people": ["Jonas", "Aiko"],
        "MEMORY.md": """# MEMORY

## Project: tidewatch
- A command-line tool in Rust that reads tide tables and prints the next high water.
- Releases are cut by tagging vX.Y.Z; GitHub Actions builds binaries for Linux, macOS and Windows.
- Minimum supported Rust version is 1.74; clippy must pass with -D warnings.
""",
        "memory/2026-10-21.md": """# 2026-10-21

## Bugs
- Times were off by an hour in March: the parser ignored daylight saving; switched to chrono-tz.
- Jonas reported that the Windows build fails to find the config file under %APPDATA%.
""",
        "memory/2026-11-04.md": """# 2026-11-04

## Review
- Aiko suggested replacing the hand-written argument parsing with clap derive; merged in PR #88.
- Benchmarks: parsing a year of tide data takes 3 ms after switching from regex to nom.
""",
    },
    "tiny/garden": {
        "people": ["Bill", "Rosa"],
        "MEMORY.md": """# MEMORY

## Allotment
- Plot 14 at the Fernhill allotments; the rent is due every April.
- The water butts fill from the shed roof; the tap by the gate is shut off from November to March.
""",
        "memory/2026-04-11.md": """# 2026-04-11

## Sowing
- Sowed broad beans and sweet peas in the cold frame; tomatoes stay on the windowsill until May.
- Bill from plot 15 gave us rhubarb crowns; planted at the far end by the compost bins.
""",
        "memory/2026-06-28.md": """# 2026-06-28

## Pests
- Slugs ate half the lettuce; trying copper tape and beer traps rather than pellets.
- Rosa says the blackfly on the beans goes if you pinch out the tips.
- First courgettes picked; the plants need watering every evening in this heat.
""",
    },
    "tiny/wedding": {
        "people": ["Leila", "Owen"],
        "MEMORY.md": """# MEMORY

## Wedding: Leila and Owen, 19 September 2026
- Venue: Hartwell Barn, ceremony at 14:00, 85 guests confirmed.
- Budget ceiling 18,000; deposit of 3,000 paid to the venue in January.
""",
        "memory/2026-03-08.md": """# 2026-03-08

## Suppliers
- Photographer booked: Nadia Berg, eight hours of coverage, the album comes extra.
- The caterer can do a vegan main for nine guests; final numbers due four weeks before.
""",
        "memory/2026-05-17.md": """# 2026-05-17

## Open questions
- Owen wants a ceilidh band; Leila prefers a DJ after 21:00, so maybe both.
- Invitations were posted on 15 May; replies requested by 1 July.
- Rings are being resized at the jeweller in Bath, ready in three weeks.
""",
    },
    "tiny/car": {
        "people": ["Dev", "Marta"],
        "MEMORY.md": """# MEMORY

## Car
- 2019 Skoda Octavia estate, diesel; registration ends in 4KT.
- MOT due every August; the garage is Dev's Autos on the ring road.
- Tyre pressure: 2.3 bar front, 2.5 bar rear when loaded.
""",
        "memory/2026-08-05.md": """# 2026-08-05

## MOT
- Passed the MOT with an advisory on the rear brake pads; Dev quoted 160 to replace them.
- The AdBlue warning came on; topped up with 10 litres from the petrol station.
""",
        "memory/2026-10-30.md": """# 2026-10-30

## Selling?
- Marta thinks we should sell it and lease an electric car; the dealer offered 11,500 in part exchange.
- Charging at home would need a wallbox; the electrician quoted 950 including the install.
""",
    },
    "tiny/language": {
        "people": ["Keiko", "Paul"],
        "MEMORY.md": """# MEMORY

## Learning Japanese
- Goal: pass JLPT N4 in July; currently working through Genki II, chapter 14.
- Tutor is Keiko on italki, Tuesdays and Saturdays at 08:00, 45 minutes each.
""",
        "memory/2026-09-03.md": """# 2026-09-03

## Progress
- Anki streak of 120 days; about 900 kanji cards, retention around 86%.
- Struggling with keigo; Keiko recommended the humble forms first.
""",
        "memory/2026-10-18.md": """# 2026-10-18

## Exchange
- Paul from the meetup wants a language exchange: his Japanese, my Spanish, Sunday mornings at the library.
- Bought a Nintendo game in Japanese for reading practice; the furigana help.
""",
    },
    "tiny/moving": {
        "people": ["Sofia", "Pete"],
        "MEMORY.md": """# MEMORY

## Moving house
- Completion date 28 November; keys collected from the estate agent after 12:00.
- New address: 7 Linden Close; the old flat's tenancy ends on 30 November.
""",
        "memory/2026-11-02.md": """# 2026-11-02

## To do
- Removal van booked with Pete's firm: 07:30 start, three movers, 780 all in.
- Broadband at the new place goes live on 3 December; until then, mobile hotspot.
- Sofia is packing the kitchen; the good glasses go in the crate marked FRAGILE.
""",
        "memory/2026-11-20.md": """# 2026-11-20

## Admin
- Redirected post for six months through the Royal Mail service.
- Told the council and the bank about the new address; the dentist still to do.
""",
    },
    "tiny/band": {
        "people": ["Ines", "Callum"],
        "MEMORY.md": """# MEMORY

## The Lowtides (band)
- I play bass; Ines sings and plays keys, Callum is on drums.
- Rehearsals on Wednesdays at 19:30 at Stagebox studio, room 3, booked until December.
""",
        "memory/2026-09-25.md": """# 2026-09-25

## Gig
- Next gig at the Crown on 14 October, a 40-minute set, we are on second.
- Callum's snare stand broke; borrowing the studio's for now.
- Set list opens with Low Tide and closes with the Fleetwood Mac cover.
""",
        "memory/2026-10-15.md": """# 2026-10-15

## After the gig
- Sold 23 CDs and 6 t-shirts at the merch table; 310 in cash, split four ways after costs.
- The sound engineer said the bass was too boomy; try rolling off below 60 Hz.
""",
    },
}

QUESTIONS = [  # (workspace, question, snippet of the line that answers it)
    ("tiny/platform-team", "who is in charge of the payments system", "Mei owns the billing service"),
    ("tiny/platform-team", "when is the daily team meeting", "Standup is at 09:45"),
    ("tiny/platform-team", "what must accompany a schema change", "rollback script checked in"),
    ("tiny/platform-team", "how long do toggles stay before cleanup", "stale flags are removed"),
    ("tiny/platform-team", "why were customers seeing gateway errors", "certificate expired"),
    ("tiny/platform-team", "what did we agree to do after the outage", "alert 21 days before"),
    ("tiny/platform-team", "which messaging system are we leaving", "move the job queue from RabbitMQ"),
    ("tiny/platform-team", "how long did I say the queue migration would take", "I said six weeks"),
    ("tiny/platform-team", "where is the infrastructure state kept", "keep Terraform state in S3"),
    ("tiny/platform-team", "who wrote up the incident report", "Mei wrote the postmortem"),
    ("tiny/health", "what pain medicine can't I take", "Allergic to ibuprofen"),
    ("tiny/health", "who is my family doctor", "GP is Dr Alvarez"),
    ("tiny/health", "what pill do I take for my heart pressure", "5 mg amlodipine"),
    ("tiny/health", "what is wrong with my leg", "patellar tendinopathy"),
    ("tiny/health", "am I allowed to jog right now", "no running for four weeks"),
    ("tiny/health", "what rehab moves should I do", "single-leg squats"),
    ("tiny/health", "what were my lipid results", "Cholesterol came back at 5.8"),
    ("tiny/health", "when is my vaccination appointment", "Flu jab booked"),
    ("tiny/health", "how do I get more of my regular medicine", "repeat prescriptions are ordered"),
    ("tiny/finances", "when do I get paid", "Salary lands on the 25th"),
    ("tiny/finances", "how much is the monthly housing payment", "rent of 1,450"),
    ("tiny/finances", "where is the rainy-day money kept", "Emergency fund target"),
    ("tiny/finances", "who does my tax return", "Greg, the accountant"),
    ("tiny/finances", "what happened to my old retirement savings", "Moved the old workplace pension"),
    ("tiny/finances", "how much do I put into funds each month", "Monthly 300 into a global index fund"),
    ("tiny/finances", "which company supplies our electricity now", "Switched energy supplier to Octopus"),
    ("tiny/finances", "how do we share the cost of covering the vehicle", "split the car insurance"),
    ("tiny/finances", "what subscription did I stop", "Cancelled the gym membership"),
    ("tiny/rust-cli", "what does my side project do", "prints the next high water"),
    ("tiny/rust-cli", "how are new versions published", "Releases are cut by tagging"),
    ("tiny/rust-cli", "what is the oldest compiler we support", "Minimum supported Rust version"),
    ("tiny/rust-cli", "why were the hours wrong in spring", "the parser ignored daylight saving"),
    ("tiny/rust-cli", "what problem happens on Microsoft's operating system", "Windows build fails"),
    ("tiny/rust-cli", "which library now handles the command flags", "clap derive"),
    ("tiny/rust-cli", "how fast is reading a whole year of data", "takes 3 ms"),
    ("tiny/rust-cli", "who proposed changing how arguments are handled", "Aiko suggested replacing"),
    ("tiny/garden", "which plot is ours", "Plot 14 at the Fernhill"),
    ("tiny/garden", "when do we pay for the plot", "the rent is due every April"),
    ("tiny/garden", "when is the water turned off at the gate", "shut off from November to March"),
    ("tiny/garden", "what did we start in the cold frame", "Sowed broad beans and sweet peas"),
    ("tiny/garden", "what did the neighbour give us", "gave us rhubarb crowns"),
    ("tiny/garden", "what is eating the salad", "Slugs ate half the lettuce"),
    ("tiny/garden", "how do I get rid of the insects on the beans", "pinch out the tips"),
    ("tiny/garden", "how often do the zucchini need water", "watering every evening"),
    ("tiny/wedding", "where is the ceremony taking place", "Venue: Hartwell Barn"),
    ("tiny/wedding", "how much can we spend at most", "Budget ceiling"),
    ("tiny/wedding", "who is taking the pictures", "Photographer booked"),
    ("tiny/wedding", "can the food be plant-based for some guests", "vegan main for nine guests"),
    ("tiny/wedding", "what music do they want for the evening", "ceilidh band"),
    ("tiny/wedding", "when were the invites sent out", "Invitations were posted"),
    ("tiny/wedding", "where are the wedding bands being adjusted", "Rings are being resized"),
    ("tiny/wedding", "how many people are coming", "85 guests confirmed"),
    ("tiny/car", "what vehicle do we drive", "2019 Skoda Octavia"),
    ("tiny/car", "when is the yearly roadworthiness test", "MOT due every August"),
    ("tiny/car", "how much air goes in the wheels", "Tyre pressure"),
    ("tiny/car", "what did the mechanic say needs attention soon", "advisory on the rear brake pads"),
    ("tiny/car", "what warning light came on", "The AdBlue warning came on"),
    ("tiny/car", "how much would the dealer give us for our car", "offered 11,500"),
    ("tiny/car", "what would it cost to charge the car at home", "the electrician quoted 950"),
    ("tiny/car", "who wants to switch to a battery vehicle", "Marta thinks we should sell"),
    ("tiny/language", "which exam am I aiming for", "pass JLPT N4"),
    ("tiny/language", "what textbook am I using", "Genki II"),
    ("tiny/language", "when are my lessons", "Tuesdays and Saturdays at 08:00"),
    ("tiny/language", "how long have I kept up my flashcards", "Anki streak of 120 days"),
    ("tiny/language", "what part of the grammar is hard for me", "Struggling with keigo"),
    ("tiny/language", "who wants to swap languages with me", "wants a language exchange"),
    ("tiny/language", "what did I buy to practise reading", "Bought a Nintendo game"),
    ("tiny/moving", "when do we get the keys to the new house", "Completion date 28 November"),
    ("tiny/moving", "what is our new address", "New address: 7 Linden Close"),
    ("tiny/moving", "when does the lease on the old place end", "tenancy ends on 30 November"),
    ("tiny/moving", "how much are the movers charging", "780 all in"),
    ("tiny/moving", "when will the internet work at the new home", "Broadband at the new place"),
    ("tiny/moving", "who is boxing up the kitchen", "Sofia is packing the kitchen"),
    ("tiny/moving", "how will letters reach us after the move", "Redirected post for six months"),
    ("tiny/moving", "who have we not yet told that we moved", "the dentist still to do"),
    ("tiny/band", "what instrument do I play in the group", "I play bass"),
    ("tiny/band", "where and when do we practise", "Rehearsals on Wednesdays"),
    ("tiny/band", "when is our next show", "Next gig at the Crown"),
    ("tiny/band", "what piece of the drum kit broke", "snare stand broke"),
    ("tiny/band", "what song do we end with", "closes with the Fleetwood Mac cover"),
    ("tiny/band", "how much did we make selling merchandise", "Sold 23 CDs"),
    ("tiny/band", "what feedback did we get about the low end", "the bass was too boomy"),
    ("tiny/band", "who is the singer", "Ines sings and plays keys"),
]

# Plain-word questions about things none of the tiny workspaces holds (nor, by design, the shape of any
# answer there); distinct from the held-out check's dev set (bench/abstention/offtopic_small.jsonl).
OFFTOPIC = [
    "how do I rotate the ssh keys on the build server",
    "what was the score in the cricket final",
    "which vitamins should I take in winter",
    "how tall is mount kilimanjaro",
    "what is the best way to descale a kettle",
    "when does the library close on sundays",
    "which laptop did I decide to buy",
    "how do I fix a dripping bathroom tap",
    "what did my sister name her baby",
    "what is the boiling point of olive oil",
    "which podcast episode was about sleep",
    "how many calories are in a croissant",
    "what time does the ferry leave for the island",
    "who painted the ceiling of the sistine chapel",
    "how do I merge two pdf files",
    "what did the landlord say about the mould",
    "which chess opening am I practising",
    "how much does a passport renewal cost",
    "what is the password policy for the vpn",
    "where did we go skiing last winter",
    "how do I make sourdough starter",
    "what is the difference between a crocodile and an alligator",
    "when is the next solar eclipse",
    "which charity do we donate to every month",
    "how do I unblock a kitchen sink",
    "what did the vet say about the hamster",
    "what is the plot of the novel I am reading",
    "how do I set up a printer on linux",
    "which hotel did we stay at in rome",
    "what was decided at the school governors meeting",
    "how long should I boil an egg",
    "which team won the basketball championship",
    "what is the population of canada",
    "how do I knit a scarf",
    "what did the plumber charge for the boiler",
    "which wine goes with fish",
    "how do I change a bicycle inner tube",
    "what is the speed of sound",
    "when is my dentist appointment",
    "which museum has the dinosaur exhibition",
]


def main() -> None:
    people = {}
    for ws, files in WORKSPACES.items():
        people[ws] = files["people"]
        for name, text in files.items():
            if name == "people":
                continue
            path = HERE / ws / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    with (HERE / "tiny.jsonl").open("w") as out:
        for n, (ws, query, snippet) in enumerate(QUESTIONS):
            path, line = line_of(HERE / ws, snippet, query)
            row = {"qid": f"tiny-{n:03d}", "query": query, "workspace": ws, "category": "tiny"}
            out.write(json.dumps(row | {"people": people[ws], "relevant": [{"path": path, "line": line}]}) + "\n")
    with (HERE / "offtopic.jsonl").open("w") as out:
        for n, query in enumerate(OFFTOPIC):
            out.write(json.dumps({"qid": f"offtopic-{n:03d}", "query": query, "relevant": []}) + "\n")
    print(f"wrote {len(QUESTIONS)} questions over {len(WORKSPACES)} workspaces, {len(OFFTOPIC)} off-topic")


if __name__ == "__main__":
    main()
