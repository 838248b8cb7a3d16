"""The tools of the support agent example (`rfteval run --tools datasets/support/tools.py`): Larkspur Fibre's help
centre, the same made-up articles the single-answer items inline (datasets/support/items.jsonl), behind a search.

The agent items (datasets/support/agent_items.jsonl) hold no article: an answer grounded in the help centre has to
search it and read what it cites. rfteval runs each turn's calls in the python sandbox.
"""

from __future__ import annotations

import re

ARTICLES: dict[str, str] = {
    "KB-104": "Router lights: a blinking red light means no fibre signal. Unplug the router for 30 seconds, plug it "
              "back in and wait 5 minutes. If the light stays red, check the outage map.",
    "KB-115": "Wi-Fi password: open the Larkspur app, choose Network, then Wi-Fi settings, and set a new password of "
              "at least 12 characters. Devices must reconnect afterwards.",
    "KB-130": "Wi-Fi reach: place the router in the open, off the floor, away from microwaves. The 5 GHz network is "
              "faster but has a shorter range than 2.4 GHz.",
    "KB-131": "Mesh extenders: customers on any plan can rent a mesh extender for 4 per month.",
    "KB-132": "Speed tests: test on a device wired to the router with an ethernet cable. Wi-Fi results are lower. "
              "Wired speeds within 10% of the plan speed are normal.",
    "KB-140": "Parental controls: in the Larkspur app, choose Family, add a profile per child, assign devices and "
              "set schedules or content filters per profile.",
    "KB-150": "Email: Larkspur stopped providing email addresses in 2023. Existing addresses were moved to Fastmail, "
              "which can be set up in any mail app.",
    "KB-221": "Outage map: larkspur.example/status lists known outages by postcode, updated every 10 minutes.",
    "KB-222": "Outage credit: when an outage lasts more than 24 hours, a credit of one day's fee per outage day is "
              "added automatically to the next bill.",
    "KB-310": "Duplicate charges: when a payment is taken twice, the second charge is reversed automatically within "
              "5 business days. No action is needed.",
    "KB-311": "Billing team: reachable at billing@larkspur.example or 0800 555 0130, weekdays 8:00-18:00.",
    "KB-402": "Moving home: tell us at least 14 days before the move. The service transfer is free when the new "
              "address is in our network; check coverage at larkspur.example/move.",
    "KB-520": "Static IP: available on Business plans only, for 10 per month. Request it in the business portal; it "
              "is active within 1 business day.",
    "KB-610": "Early cancellation: contracts cancelled before the end of the minimum term pay 15 per remaining "
              "month. Cancel in the app under Account, or by phone.",
    "KB-900": "Services: Larkspur Fibre provides fibre internet, Wi-Fi equipment and static IPs. We do not sell TV or "
              "phone services.",
}

# what customers call each article's subject, beside its own words (a help centre's search tags)
TAGS: dict[str, str] = {
    "KB-104": "router light red blinking internet down restart",
    "KB-115": "wi fi password change network settings",
    "KB-130": "wi fi slow signal range bedroom room coverage",
    "KB-131": "mesh extender wi fi slow room range rent",
    "KB-132": "speed test slow mbps bandwidth",
    "KB-140": "parental controls kids children stop schedule block time night",
    "KB-150": "email mail address phone setup",
    "KB-221": "outage internet down status street area",
    "KB-222": "outage compensation compensated credit refund",
    "KB-310": "charged twice duplicate payment bill money back refund",
    "KB-311": "billing contact phone email bill",
    "KB-402": "moving home move house flat new address",
    "KB-520": "static ip vpn business office",
    "KB-610": "cancel cancellation contract fee leave months",
    "KB-900": "services tv aerial phone install engineer roof",
}

_WORD = re.compile(r"[a-z0-9]+")
# words too common in the help centre to tell its articles apart
_STOP = frozenset("a an and are as at be but by can do for from how i in is it its my me of on or our the this to "
                  "we what when which with you your larkspur".split())


def _stems(text: str) -> set[str]:
    """Words compared by their first five letters ("charged" finds "charges"), common ones left out."""
    return {w[:5] for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def search_articles(query: str) -> list[dict[str, object]]:
    """The help-centre articles sharing the most words with `query` (a tag word counts twice), best first (at most
    3): id, title, score."""
    words = _stems(query)
    if not words:
        raise ValueError("query is empty: give words of the customer's question")
    scored = []
    for aid, text in ARTICLES.items():
        score = len(words & _stems(text)) + 2 * len(words & _stems(TAGS.get(aid, "")))
        if score:
            scored.append((-score, aid, text.split(":", 1)[0]))
    return [{"id": aid, "title": title, "score": -neg} for neg, aid, title in sorted(scored)[:3]]


def get_article(id: str) -> dict[str, str]:  # noqa: A002  # the tool's parameter, as the model sends it
    """One article's title and text, by its id (search_articles gives ids)."""
    if id not in ARTICLES:
        raise LookupError(f"no article with id {id!r} (search_articles gives ids)")
    title, text = ARTICLES[id].split(":", 1)
    return {"id": id, "title": title, "text": text.strip()}
