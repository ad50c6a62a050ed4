"""The numbers a text writes, each typed: an amount with its unit and sign, or a year, a date, a time,
an id, a version, a phone number or a range (issue 40).

A figure the app computes from a file is only as right as its reading of the file's numbers, and a
regular expression that takes every run of digits for a value adds an invoice number's digits, reads
``12.5mg`` as nothing and ``-€12.50`` as income.  This module is the app's one reader of numbers:

* **separators**: ``1,234.50``, ``1.234,50``, ``1 234,50`` (spaces, no-break spaces), ``1'234.50``;
  a lone comma before one or two digits is a decimal comma (``12,5 mg``); before exactly three digits
  it is read by the text's own habit (a text that writes ``1.234,50`` elsewhere uses decimal commas);
* **signs**: ``-``, ``−`` (U+2212), a ledger's parentheses ``(12.50)``, a trailing minus ``12.50-``;
* **units**: glued or spaced, before or after (``€12.50``, ``12.50 €``, ``EUR 12.50``, ``12.5mg``,
  ``7.5 mg``, ``20 %``), normalised (``€`` -> ``EUR``, ``mL`` -> ``ml``, ``hrs`` -> ``h``);
* **not amounts**: digits inside an id (``INV-2023-0042``, ``VC-017``, ``#412``, ``4471-B``, ``12B``),
  years (``In 2023``), dates (``3 March 2021``, ``March 3, 2021``, ``2021-03-03``, ``03/03/2021``),
  times (``08:30``), versions (``v1.2.3``), phone numbers and ranges (``5-10 mg``).

It reads; it never decides which amount answers a question (``answers`` does, with the model's reading
first).  Pure functions of the text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# -- units -------------------------------------------------------------------------------------------

_UNITS = {
    # money
    "€": "EUR", "eur": "EUR", "euro": "EUR", "euros": "EUR", "$": "USD", "usd": "USD", "us$": "USD",
    "dollar": "USD", "dollars": "USD", "£": "GBP", "gbp": "GBP", "pound": "GBP", "pounds": "GBP",
    "chf": "CHF", "fr.": "CHF", "zł": "PLN", "zl": "PLN", "pln": "PLN", "złoty": "PLN", "zloty": "PLN",
    "sek": "SEK", "nok": "NOK", "dkk": "DKK", "kr": "kr", "kr.": "kr", "¥": "JPY", "jpy": "JPY", "yen": "JPY",
    "₹": "INR", "inr": "INR", "cad": "CAD", "aud": "AUD", "c$": "CAD", "a$": "AUD",
    # mass, volume
    "mg": "mg", "milligram": "mg", "milligrams": "mg", "mcg": "mcg", "µg": "mcg", "μg": "mcg", "ug": "mcg",
    "microgram": "mcg", "micrograms": "mcg", "g": "g", "gram": "g", "grams": "g", "kg": "kg", "kilo": "kg",
    "kilos": "kg", "kilogram": "kg", "kilograms": "kg", "t": "t", "tonne": "t", "tonnes": "t", "lb": "lb",
    "lbs": "lb", "oz": "oz", "ml": "ml", "millilitre": "ml", "milliliter": "ml", "millilitres": "ml",
    "milliliters": "ml", "cl": "cl", "dl": "dl", "l": "l", "litre": "l", "liter": "l", "litres": "l",
    "liters": "l", "iu": "IU", "units": "units", "tablet": "tablets", "tablets": "tablets", "tab": "tablets",
    "tabs": "tablets", "drops": "drops", "puffs": "puffs",
    # length, area, speed
    "km": "km", "kilometre": "km", "kilometer": "km", "kilometres": "km", "kilometers": "km", "m": "m",
    "metre": "m", "meter": "m", "metres": "m", "meters": "m", "cm": "cm", "mm": "mm", "mi": "mi", "mile": "mi",
    "miles": "mi", "ft": "ft", "feet": "ft", "m²": "m2", "m2": "m2", "sqm": "m2", "km/h": "km/h", "mph": "mph",
    # time
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h", "min": "min", "mins": "min", "minute": "min",
    "minutes": "min", "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s", "ms": "ms",
    "day": "days", "days": "days", "week": "weeks", "weeks": "weeks",
    # other
    "%": "%", "percent": "%", "per cent": "%", "pct": "%", "°c": "°C", "°f": "°F", "kwh": "kWh", "wh": "Wh",
    "kw": "kW", "w": "W", "v": "V", "mah": "mAh", "gb": "GB", "mb": "MB", "kb": "KB", "tb": "TB",
    "pcs": "pcs", "pc": "pcs", "x": "x",
}
_CURRENCY_BEFORE = r"(?:€|\$|£|¥|₹|US\$|C\$|A\$|EUR|USD|GBP|CHF|PLN|SEK|NOK|DKK|JPY|INR|CAD|AUD|Fr\.)"
_UNIT_AFTER = (r"(?:%|°\s?[CF]|€|\$|£|zł|kr\.?|Fr\.|(?:EUR|USD|GBP|CHF|PLN|SEK|NOK|DKK|JPY|INR|CAD|AUD)\b"
               r"|(?:mcg|µg|μg|ug|mg|kg|g|ml|mL|cl|dl|l|L|km/h|km|cm|mm|m²|m2|mi|ft|lbs?|oz|hrs?|h|mins?|ms|secs?|s"
               r"|kWh|Wh|kW|W|V|mAh|GB|MB|KB|TB|IU|pcs|x)(?![\w])"
               r"|(?:per cent|percent|euros?|dollars?|pounds?|złoty|zloty|milligrams?|micrograms?|grams?|kilos?|"
               r"kilograms?|tonnes?|millilit(?:re|er)s?|lit(?:re|er)s?|kilomet(?:re|er)s?|met(?:re|er)s?|miles?|"
               r"feet|hours?|minutes?|seconds?|days?|weeks?|tablets?|tabs?|units|drops|puffs)\b)")


# Words that name a unit (a "how many hours" counts a quantity, not rows).
UNIT_WORDS = frozenset(k for k in _UNITS if k.isalpha() and len(k) > 2 and k not in ("tab", "tabs", "units"))


def normal_unit(unit: str | None) -> str:
    """A unit as the app compares units: ``"€"``, ``"eur"`` and ``"euros"`` are ``"EUR"``; ``"mL"`` is
    ``"ml"``; an unknown one stays as written (trimmed); none is ``""``."""
    if not unit:
        return ""
    text = " ".join(str(unit).split()).strip(" .") if str(unit).strip() not in ("Fr.", "kr.") else str(unit).strip()
    if not text:
        return ""
    key = text.lower().replace("°\u00a0", "°").replace("° ", "°")
    if key in _UNITS:
        return _UNITS[key]
    if text in ("L",):
        return "l"
    return text


# -- numbers -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Quantity:
    """One number of a text: its value (signed), unit (normalised, "" for none), where it is, and its
    kind: "amount" (a value to count or add), or "year", "date", "time", "id", "version", "phone",
    "range" (never added)."""

    value: float
    unit: str
    start: int
    end: int
    kind: str = "amount"
    text: str = ""


_DIGITS = r"(?!0\d)\d{1,3}(?:(?:,|\.|'|’|\u00a0|\u202f| )\d{3})+(?:[.,]\d+)?(?!\d)|\d+(?:[.,]\d+)?"
_NUMBER = re.compile(
    r"(?P<open>\()?"
    rf"(?P<sign>(?<![\w-])[-−](?=(?:{_CURRENCY_BEFORE}\s?)?\d))?\s?"
    rf"(?:(?P<cur>{_CURRENCY_BEFORE})\s?(?P<sign2>[-−])?)?"
    rf"(?<![\d:.,])(?P<num>{_DIGITS})"
    r"(?P<mult>\s?(?:k|K|m|M|mn|bn|million|billion|thousand)\b(?!\s?(?:²|2\b)))?"
    rf"(?P<unit>\s?{_UNIT_AFTER})?"
    r"(?P<trail>-(?![\w\d]))?"
    r"(?P<close>\))?")

_MONTHS = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|"
           r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?|stycznia|lutego|marca|kwietnia|maja|czerwca|lipca|sierpnia|"
           r"września|października|listopada|grudnia|Januar|Februar|März|Mai|Juni|Juli|Oktober|Dezember|janvier|"
           r"février|mars|avril|juin|juillet|août|septembre|octobre|novembre|décembre)\.?")
_DATE = re.compile(
    r"\b\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?\b"
    r"|\b\d{1,2}[./-]\d{1,2}[./-]\d{2,4}\b"
    rf"|\b(?:0?[1-9]|[12]\d|3[01])(?:st|nd|rd|th)?\.?\s+{_MONTHS}(?:,?\s+\d{{4}})?\b"
    rf"|\b{_MONTHS}\s+(?:0?[1-9]|[12]\d|3[01])(?![\d,.]\d)(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?\b"
    r"|(?<![\d.,€$£])\b(?:0[1-9]|[12]\d|3[01])\.(?:0[1-9]|1[0-2])\.(?=\s)"
    rf"|\b{_MONTHS}\s+\d{{4}}\b"
    r"|\b\d{1,2}/\d{1,2}\b(?!\s?(?:mg|g|ml|%))", re.I)
_TIME = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[ap]\.?m\.?)?\b", re.I)
_VERSION = re.compile(r"\b[vV]\d+(?:\.\d+)*\b|\b\d+\.\d+\.\d+(?:\.\d+)*\b")
_PHONE = re.compile(r"(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,5}\)[\s.-]?)?\d{2,5}(?:[\s.-]\d{2,5}){2,4}\b"
                    r"|\b\d{3}-\d{4}\b")
_RANGE = re.compile(rf"(?<![\w.,-])\d+(?:[.,]\d+)?(?:\s[-–—]\s|[-–—]|\sto\s)\d+(?:[.,]\d+)?\s?{_UNIT_AFTER}?")
_ID_BEFORE = re.compile(r"(?:[A-Za-z][\w]*[-_/]|#|№|\b(?:no|nr|num|ref|id|po|order|invoice|inv|ticket|case|"
                        r"room|page|p|pp|chapter|ch|section|sec|item|line|row|table|figure|fig|step|version|"
                        r"ver|build|release|issue|pr|bug|code|pin|account|acct|iban|sort code|vat|tax id|"
                        r"postcode|zip|unit|flat|apt|suite|floor|level|batch|lot|serial|sku|model|part)\.?\s?"
                        r"(?:no\.?\s?|number\s|#\s?)?)$", re.I)
_ID_AFTER = re.compile(r"^(?:[A-Za-z](?![a-z]{2})|[-_/][A-Za-z\d])")
_YEAR_CONTEXT = re.compile(r"(?:\b(?:in|since|by|from|until|till|during|before|after|year|fy|fiscal|"
                           r"circa|c\.|around|©|copyright|spring|summer|autumn|fall|winter|q[1-4])\s*)$", re.I)


def comma_decimal(text: str) -> bool | None:
    """The text's own habit: True when it writes decimal commas (``1.234,50``, ``12,5``), False when it
    writes decimal points (``1,234.50``, ``12.5``), None when it shows neither."""
    commas = len(re.findall(r"\d\.\d{3},\d{1,2}\b|(?<![\d.,])\d{1,3},\d{1,2}(?![\d,.])|\d \d{3},\d{2}\b", text))
    points = len(re.findall(r"\d,\d{3}\.\d{1,2}\b|(?<![\d.,])\d+\.\d{1,2}(?![\d,.])", text))
    if commas > points:
        return True
    if points > commas:
        return False
    return None


def parse_number(digits: str, commas: bool | None = None) -> float | None:
    """``digits`` (as ``_DIGITS`` matches it) as a float, by its separators and the text's habit."""
    d = digits.replace("\u00a0", " ").replace("\u202f", " ").replace("’", "'")
    seps = [c for c in d if not c.isdigit()]
    if not seps:
        return float(d)
    last = seps[-1]
    groups = re.split(r"[,.' ]", d)
    if len(seps) == 1 and last in ",." and len(groups[-1]) != 3:
        return float(d.replace(",", "."))                    # 12,5 · 12.5 · 1234.56
    if len(seps) == 1 and last in ",." and len(groups[-1]) == 3:
        decimal_here = (commas is True and last == ",") or (commas is False and last == ".")
        if decimal_here or groups[0] == "0":
            return float(d.replace(",", "."))                # 0,125 · 1,234 in a decimal-comma text
        return float(d.replace(",", "").replace(".", ""))     # 1,234 · 1.234 (thousands)
    # several separators: the last one is the decimal mark when it differs from those before it
    body, tail = d, ""
    if last in ",." and len(set(seps)) > 1 and len(groups[-1]) != 3:
        body, tail = d[:d.rfind(last)], d[d.rfind(last) + 1:]
    elif last in ",." and len(set(seps)) > 1 and seps.count(last) == 1:
        body, tail = d[:d.rfind(last)], d[d.rfind(last) + 1:]
    whole = re.sub(r"[,.' ]", "", body)
    if not whole.isdigit():
        return None
    return float(whole + ("." + tail if tail else ""))


def quantities(text: str, commas: bool | None = None) -> list[Quantity]:
    """Every number ``text`` writes, in order, typed (the module's docstring).  ``commas``: the habit
    of the document the text comes from (``comma_decimal``); by default the text's own."""
    if commas is None:
        commas = comma_decimal(text)
    spans: list[tuple[int, int, str]] = []
    for kind, pattern in (("date", _DATE), ("time", _TIME), ("version", _VERSION), ("range", _RANGE)):
        spans += [(m.start(), m.end(), kind) for m in pattern.finditer(text)]
    spans += [(m.start(), m.end(), "phone") for m in _PHONE.finditer(text) if _phone_like(m.group(0))]
    out: list[Quantity] = []
    for m in _NUMBER.finditer(text):
        num_start, num_end = m.start("num"), m.end("num")
        value = parse_number(m.group("num"), commas)
        if value is None or math.isinf(value):
            continue
        unit = normal_unit(m.group("cur") or (m.group("unit") or "").strip())
        if m.group("mult"):
            if m.group("cur") or unit in _MONEY:
                value *= _MULTIPLIERS[m.group("mult").strip().lower()]     # £1.2m, €3.5k
            elif not unit:
                unit = normal_unit(m.group("mult").strip()) if m.group("mult").strip() == "m" else ""   # 12m: metres
        negative = bool(m.group("sign") or m.group("sign2") or m.group("trail")
                        or (m.group("open") and m.group("close")))
        kind = next((k for a, b, k in spans if a <= num_start < b), "amount")
        if kind == "amount":
            kind = _kind(text, m, value, unit)
        end = m.end() if (m.group("close") and m.group("open")) else (m.end("unit") if m.group("unit") else num_end)
        if m.group("trail"):
            end = m.end("trail")
        start = m.start("open") if (m.group("open") and m.group("close")) else m.start()
        out.append(Quantity(-value if negative and kind == "amount" else value, unit if kind == "amount" else "",
                            start, end, kind, text[start:end].strip()))
    return out


_MONEY = {"EUR", "USD", "GBP", "CHF", "PLN", "SEK", "NOK", "DKK", "JPY", "INR", "CAD", "AUD", "kr"}
_MULTIPLIERS = {"k": 1e3, "thousand": 1e3, "m": 1e6, "mn": 1e6, "million": 1e6, "bn": 1e9, "billion": 1e9}


def _phone_like(found: str) -> bool:
    digits = re.sub(r"\D", "", found)
    return len(digits) >= 7 and (found.lstrip().startswith(("+", "(")) or len(re.findall(r"\d+", found)) >= 3
                                 or re.fullmatch(r"\d{3}-\d{4}", found.strip()) is not None)


def _kind(text: str, m: re.Match, value: float, unit: str) -> str:
    """An amount, unless the words around the number say it is an id or a year."""
    first = m.start() + (len(m.group(0)) - len(m.group(0).lstrip()))
    before = text[max(0, first - 24):first]
    after = text[m.end():m.end() + 3]
    whole = re.fullmatch(r"\d+", m.group("num")) is not None
    if whole and len(m.group("num")) > 1 and m.group("num")[0] == "0" and not (m.group("cur") or m.group("unit")):
        return "id"                                           # donor 0125, 007: a code, not a quantity
    if _ID_BEFORE.search(before) and whole and not (m.group("cur") or m.group("unit")):
        return "id"                                           # room 12 · page 4 (not "room 6,000.00")
    if re.search(r"[A-Za-z]$|\w[-_/]$", before) or (m.group("unit") is None and _ID_AFTER.match(after)):
        return "id"                                           # A1 · INV-2023-0042 · 12B · 4471-B
    digits = m.group("num")
    counted = re.match(r"\s+(?!(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\w*\b)[a-z]+s\b",
                       text[m.end():m.end() + 30])
    if (not unit and re.fullmatch(r"(?:19|20)\d\d", digits) and not m.group("sign")
            and (_YEAR_CONTEXT.search(before) or not counted)):
        return "year"                                         # "In 2023", "2023 was" (not "2023 visitors")
    return "amount"


_NUMBER_WORDS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                             "thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
                                             "twenty".split())}
_NUMBER_WORDS.update({"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
                      "hundred": 100, "a hundred": 100, "a dozen": 12, "dozen": 12})
_NUMBER_WORD = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, _NUMBER_WORDS), key=len, reverse=True)) + r")\b",
                          re.I)


def number_words(text: str) -> list[Quantity]:
    """Counts written in words ("four engineers", "a dozen"), as amounts without a unit."""
    return [Quantity(float(_NUMBER_WORDS[m.group(0).lower()]), "", m.start(), m.end(), "amount", m.group(0))
            for m in _NUMBER_WORD.finditer(text)]


def amounts(text: str, commas: bool | None = None) -> list[Quantity]:
    """The numbers of ``text`` that are amounts (values to count or add), in order."""
    return [q for q in quantities(text, commas) if q.kind == "amount"]


def number_in(given, commas: bool | None = None) -> Quantity | None:
    """A value as a model gave it (a number, or a string such as ``"12.5 mg"`` or ``"-€12.50"``) as one
    amount; None when it is none or not exactly one amount."""
    if isinstance(given, bool) or given is None:
        return None
    if isinstance(given, (int, float)):
        return Quantity(float(given), "", 0, 0) if math.isfinite(float(given)) else None
    found = amounts(str(given), commas)
    return found[0] if len(found) == 1 else None
