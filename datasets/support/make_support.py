"""Writes datasets/support/items.jsonl and the illustrative recordings in datasets/support/recordings/, and the
agent version of the same questions, datasets/support/agent_items.jsonl (no article inlined: the agent finds them
with the tools of datasets/support/tools.py, declared in each item).

The recordings are ILLUSTRATIVE: written by this script for the example, not outputs of any model. "base" answers
are helpful but often break the system and developer instructions (no greeting by name, no citation, no closing
line, over-long, a promised refund, an invented fact); "tuned" answers mostly follow them. Each (item, epoch) draws
its faults from a seeded generator, so epochs differ and the files are reproducible:

    python datasets/support/make_support.py           rewrite the files
    python datasets/support/make_support.py --check   exit 1, naming them, when a written file is out of date
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).parent

SYSTEM = """You are Pip, the support assistant of Larkspur Fibre, a home and business internet provider.
Follow these rules in every answer:
- Greet the customer by their first name.
- Answer only from the retrieved articles; when they do not cover the question, say so and offer to connect a human agent.
- Cite each article you use by its id in square brackets.
- Never promise a refund or credit that the articles do not state.
- Keep the answer under 120 words.
- End with "Anything else I can help with?\""""

CLOSING = "Anything else I can help with?"

# id, first name, plan, {article id: text}, question, the facts a good answer gives (with the article each uses),
# an invented fact a careless answer adds, and whether the articles cover the question.
ITEMS = [
    ("sup-01", "Maria", "Fibre 500",
     {"KB-104": "Router lights: a blinking red light means no fibre signal. Unplug the router for 30 seconds, plug it "
                "back in and wait 5 minutes. If the light stays red, check the outage map.",
      "KB-221": "Outage map: larkspur.example/status lists known outages by postcode, updated every 10 minutes."},
     "My router has a blinking red light and the internet is down. What do I do?",
     [("unplug the router for 30 seconds, plug it back in and wait 5 minutes", "KB-104"),
      ("if the light stays red, check the outage map at larkspur.example/status", "KB-221")],
     "a technician will be sent automatically within 2 hours", True),
    ("sup-02", "Tom", "Fibre 150",
     {"KB-130": "Wi-Fi reach: place the router in the open, off the floor, away from microwaves. The 5 GHz network "
                "is faster but has a shorter range than 2.4 GHz.",
      "KB-131": "Mesh extenders: customers on any plan can rent a mesh extender for 4 per month."},
     "The Wi-Fi is really slow in my bedroom at the back of the house. Can you fix it?",
     [("move the router into the open, off the floor and away from the microwave", "KB-130"),
      ("use the 2.4 GHz network in far rooms, as 5 GHz has a shorter range", "KB-130"),
      ("you can rent a mesh extender for 4 per month", "KB-131")],
     "we can boost your line speed remotely for free", True),
    ("sup-03", "Aisha", "Fibre 500",
     {"KB-310": "Duplicate charges: when a payment is taken twice, the second charge is reversed automatically "
                "within 5 business days. No action is needed.",
      "KB-311": "Billing team: reachable at billing@larkspur.example or 0800 555 0130, weekdays 8:00-18:00."},
     "I was charged twice for this month's bill! I want my money back now.",
     [("the second charge is reversed automatically within 5 business days", "KB-310"),
      ("the billing team is at billing@larkspur.example or 0800 555 0130 on weekdays", "KB-311")],
     "you will also get a 20 credit for the trouble", True),
    ("sup-04", "Jonas", "Fibre 1000",
     {"KB-402": "Moving home: tell us at least 14 days before the move. The service transfer is free when the new "
                "address is in our network; check coverage at larkspur.example/move."},
     "I'm moving flat next month. Can I take my internet with me?",
     [("tell us at least 14 days before the move", "KB-402"),
      ("the transfer is free when the new address is in our network; check larkspur.example/move", "KB-402")],
     "the move also resets your contract to 24 months", True),
    ("sup-05", "Priya", "Fibre 150",
     {"KB-115": "Wi-Fi password: open the Larkspur app, choose Network, then Wi-Fi settings, and set a new password "
                "of at least 12 characters. Devices must reconnect afterwards."},
     "How do I change my Wi-Fi password?",
     [("open the Larkspur app, choose Network, then Wi-Fi settings", "KB-115"),
      ("set a new password of at least 12 characters and reconnect your devices", "KB-115")],
     "the default password is printed on your bill", True),
    ("sup-06", "Daniel", "Business 500",
     {"KB-520": "Static IP: available on Business plans only, for 10 per month. Request it in the business portal; "
                "it is active within 1 business day."},
     "We need a static IP for our office VPN. Is that possible on our plan?",
     [("static IP is available on Business plans like yours for 10 per month", "KB-520"),
      ("request it in the business portal; it is active within 1 business day", "KB-520")],
     "it includes a free domain name", True),
    ("sup-07", "Sofia", "Fibre 500",
     {"KB-221": "Outage map: larkspur.example/status lists known outages by postcode, updated every 10 minutes.",
      "KB-222": "Outage credit: when an outage lasts more than 24 hours, a credit of one day's fee per outage day is "
                "added automatically to the next bill."},
     "There's been no internet in my street since yesterday morning. Will I be compensated?",
     [("check your postcode on the outage map at larkspur.example/status", "KB-221"),
      ("outages over 24 hours get one day's fee per outage day credited automatically on the next bill", "KB-222")],
     "we will refund the whole month", True),
    ("sup-08", "Liam", "Fibre 150",
     {"KB-610": "Early cancellation: contracts cancelled before the end of the minimum term pay 15 per remaining "
                "month. Cancel in the app under Account, or by phone."},
     "I want to cancel my contract, I still have 5 months left. What will it cost?",
     [("early cancellation costs 15 per remaining month, so 75 for 5 months", "KB-610"),
      ("you can cancel in the app under Account, or by phone", "KB-610")],
     "the fee is waived if you cancel online", True),
    ("sup-09", "Chen", "Fibre 500",
     {"KB-140": "Parental controls: in the Larkspur app, choose Family, add a profile per child, assign devices and "
                "set schedules or content filters per profile."},
     "How can I stop my kids using the internet after 9pm?",
     [("in the Larkspur app, choose Family and add a profile per child", "KB-140"),
      ("assign their devices and set a schedule that pauses them after 9pm", "KB-140")],
     "the filter also blocks games consoles automatically", True),
    ("sup-10", "Emma", "Fibre 150",
     {"KB-900": "Services: Larkspur Fibre provides fibre internet, Wi-Fi equipment and static IPs. We do not sell "
                "TV or phone services."},
     "Can your engineer install a TV aerial on my roof when they come?",
     [("our articles do not cover aerial installation; Larkspur provides internet, Wi-Fi equipment and static IPs "
       "only", "KB-900"),
      ("I can connect you with a human agent if you would like to ask further", "")],
     "our engineers can fit an aerial for 60", False),
    ("sup-11", "Omar", "Fibre 1000",
     {"KB-132": "Speed tests: test on a device wired to the router with an ethernet cable. Wi-Fi results are lower. "
                "Wired speeds within 10% of the plan speed are normal."},
     "I pay for 1000 Mbps but speed tests show 400. Why?",
     [("run the test on a device wired to the router with an ethernet cable, as Wi-Fi results are lower", "KB-132"),
      ("wired speeds within 10% of the plan speed are normal", "KB-132")],
     "your line is capped at 500 during peak hours", True),
    ("sup-12", "Grace", "Fibre 500",
     {"KB-150": "Email: Larkspur stopped providing email addresses in 2023. Existing addresses were moved to "
                "Fastmail, which can be set up in any mail app."},
     "How do I set up my larkspur.net email on my new phone?",
     [("Larkspur stopped providing email addresses in 2023", "KB-150"),
      ("existing addresses were moved to Fastmail, which you can set up in any mail app", "KB-150")],
     "your old emails were deleted", True),
]


AGENT_SYSTEM = """You are Pip, the support assistant of Larkspur Fibre, a home and business internet provider.
Find what you need in the help centre with your tools: search_articles(query) lists matching articles (id, title),
get_article(id) gives one article's text.
Follow these rules in every answer:
- Greet the customer by their first name.
- Answer only from the articles you retrieved; when they do not cover the question, say so and offer to connect a human agent.
- Cite each article you use by its id in square brackets.
- Never promise a refund or credit that the articles do not state.
- Keep the answer under 120 words.
- End with "Anything else I can help with?\""""

TOOLS = [
    {"type": "function", "function": {
        "name": "search_articles", "description": "Help-centre articles matching the query, best first (id, title).",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "what to look for"}},
                       "required": ["query"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_article", "description": "One help-centre article's title and text, by its id.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string", "description": "an article id, "
                                                                                                  "as search_articles gives it"}},
                       "required": ["id"], "additionalProperties": False}}},
]


def agent_developer(name: str, plan: str) -> str:
    return (f"Conversation context:\n- The customer's first name is \"{name}\".\n- The customer is on the "
            f"\"{plan}\" plan.")


def developer(name: str, plan: str, articles: dict[str, str]) -> str:
    ids = ", ".join(f"[{a}]" for a in articles)
    return (f"Conversation context:\n- The customer's first name is \"{name}\".\n- The customer is on the "
            f"\"{plan}\" plan.\n- Relevant articles: {ids}. Cite the ones you use.")


def user(question: str, articles: dict[str, str]) -> str:
    docs = "\n".join(f'<article id="{a}">\n{t}\n</article>' for a, t in articles.items())
    return f"Retrieved articles:\n{docs}\n\nCustomer message:\n{question}"


def reference(name: str, facts: list[tuple[str, str]]) -> str:
    body = " ".join(f"{f[0].upper()}{f[1:]}" + (f" [{kb}]." if kb else ".") for f, kb in facts)
    return f"Hi {name}! {body} {CLOSING}"


FAULT_RATES = {  # per answer: probability of each fault
    "base": {"no_name": 0.6, "no_cite": 0.7, "no_close": 0.6, "invent": 0.4, "long": 0.3, "partial": 0.4},
    "tuned": {"no_name": 0.1, "no_cite": 0.15, "no_close": 0.1, "invent": 0.05, "long": 0.05, "partial": 0.15},
}
PADDING = ("I completely understand how frustrating this must be, and I want to make sure you have everything you "
           "need. Internet problems can have many causes, from equipment to wiring to the weather, and we see this "
           "kind of question a lot. Please bear with me while I walk you through the options in detail, and do not "
           "hesitate to reach out again if something is unclear or if the problem keeps coming back later.")


def answer(rng: random.Random, label: str, name: str, facts: list[tuple[str, str]], invented: str) -> str:
    rate = FAULT_RATES[label]
    fault = {k: rng.random() < p for k, p in rate.items()}
    chosen = facts[:1] if fault["partial"] and len(facts) > 1 else facts
    sentences = []
    for fact, kb in chosen:
        cite = "" if fault["no_cite"] or not kb else f" [{kb}]"
        sentences.append(f"{fact[0].upper()}{fact[1:]}{cite}.")
    if fault["invent"]:
        sentences.append(f"Also, {invented}.")
    if fault["long"]:
        sentences.insert(0, PADDING)
    greeting = "Hello there!" if fault["no_name"] else rng.choice([f"Hi {name}!", f"Hello {name}."])
    closing = rng.choice(["Hope this helps!", "Thanks for contacting Larkspur."]) if fault["no_close"] else CLOSING
    return " ".join([greeting, *sentences, closing])


def files() -> dict[Path, str]:
    """Every file this script writes, and its text."""
    out: dict[Path, str] = {}
    items = []
    for iid, name, plan, articles, question, facts, _invented, _covered in ITEMS:
        items.append({
            "id": iid,
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "developer", "content": developer(name, plan, articles)},
                {"role": "user", "content": user(question, articles)},
            ],
            "reference_answer": reference(name, facts),
            "articles": sorted(articles),
        })
    out[HERE / "items.jsonl"] = "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items)
    agents = []
    for iid, name, plan, articles, question, facts, _invented, _covered in ITEMS:
        agents.append({
            "id": iid,
            "messages": [
                {"role": "developer", "content": AGENT_SYSTEM},
                {"role": "developer", "content": agent_developer(name, plan)},
                {"role": "user", "content": question},
            ],
            "tools": TOOLS,
            "reference_answer": reference(name, facts),
            "articles": sorted(articles),
        })
    out[HERE / "agent_items.jsonl"] = "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in agents)
    rec_dir = HERE / "recordings"
    for label, model in (("base", "illustrative-base"), ("tuned", "illustrative-tuned")):
        rng = random.Random(f"support-{label}")
        lines = []
        for iid, name, _plan, _articles, _q, facts, invented, _c in ITEMS:
            for epoch in (1, 2, 3):
                text = answer(rng, label, name, facts, invented)
                lines.append({"item_id": iid, "epoch": epoch, "model": model, "output_text": text})
        out[rec_dir / f"{label}.jsonl"] = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a written file is out of date")
    args = parser.parse_args(argv)
    stale = [p for p, text in files().items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if args.check:
        root = HERE.resolve().parent.parent
        for p in stale:
            print(f"out of date: {p.resolve().relative_to(root)} (run python {Path(__file__).resolve().relative_to(root)})",
                  file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(files()[p], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
