"""`region` as DuckDuckGo and most search tools write it: country, then language.

`us-en` is the United States in English, `cn-zh` China in Chinese, a bare country (`de`)
means that country in its usual language, and `wt-wt` means no region at all. The country
is an ISO 3166-1 code (`uk`, DuckDuckGo's spelling of `gb`, is read as `gb`), the language
an ISO 639-1 code (DuckDuckGo's `jp`, `kr` and `tzh` are read as `ja`, `ko` and `zh`).
Anything else, including the other order (`zh-cn`), is refused naming the field: a region
read the wrong way round would silently search another country.

`Region` is what the providers map from (each provider module writes its own parameters;
docs/search.md has the table). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.errors import InvalidRequestError

NO_REGION = "wt-wt"

_COUNTRIES_TEXT = """
    ad ae af ag ai al am ao aq ar as at au aw ax az ba bb bd be bf bg bh bi bj bl bm bn bo bq
    br bs bt bv bw by bz ca cc cd cf cg ch ci ck cl cm cn co cr cu cv cw cx cy cz de dj dk dm
    do dz ec ee eg eh er es et fi fj fk fm fo fr ga gb gd ge gf gg gh gi gl gm gn gp gq gr gs
    gt gu gw gy hk hm hn hr ht hu id ie il im in io iq ir is it je jm jo jp ke kg kh ki km kn
    kp kr kw ky kz la lb lc li lk lr ls lt lu lv ly ma mc md me mf mg mh mk ml mm mn mo mp mq
    mr ms mt mu mv mw mx my mz na nc ne nf ng ni nl no np nr nu nz om pa pe pf pg ph pk pl pm
    pn pr ps pt pw py qa re ro rs ru rw sa sb sc sd se sg sh si sj sk sl sm sn so sr ss st sv
    sx sy sz tc td tf tg th tj tk tl tm tn to tr tt tv tw tz ua ug um us uy uz va vc ve vg vi
    vn vu wf ws ye yt za zm zw
"""
_LANGUAGES_TEXT = """
    aa ab ae af ak am an ar as av ay az ba be bg bi bm bn bo br bs ca ce ch co cr cs cu cv cy
    da de dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht
    hu hy hz ia id ie ig ii ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky
    la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr nv ny
    oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss
    st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo
    za zh zu
"""

COUNTRIES = frozenset(_COUNTRIES_TEXT.split())
LANGUAGES = frozenset(_LANGUAGES_TEXT.split())
_COUNTRY_ALIASES = {"uk": "gb"}  # DuckDuckGo's uk-en
# DuckDuckGo's own language spellings (jp-jp, kr-kr, tw-tzh). "kr" is also Kanuri's ISO
# code; nobody searches Korea in Kanuri, and DuckDuckGo writes Korea's region kr-kr.
_LANGUAGE_ALIASES = {"jp": "ja", "tzh": "zh"}
_KR_ALIAS = {"kr": "ko"}

# A country's usual search language, for a bare country. A country not listed here has no
# language sent where a provider needs one (its country still is, where the provider has it).
DEFAULT_LANGUAGE = {
    "ae": "ar", "ar": "es", "at": "de", "au": "en", "be": "nl", "bg": "bg", "br": "pt",
    "ca": "en", "ch": "de", "cl": "es", "cn": "zh", "co": "es", "cz": "cs", "de": "de",
    "dk": "da", "ee": "et", "eg": "ar", "es": "es", "fi": "fi", "fr": "fr", "gb": "en",
    "gr": "el", "hk": "zh", "hr": "hr", "hu": "hu", "id": "id", "ie": "en", "il": "he",
    "in": "en", "it": "it", "jp": "ja", "kr": "ko", "lt": "lt", "lv": "lv", "mo": "zh",
    "mx": "es", "my": "ms", "nl": "nl", "no": "nb", "nz": "en", "pe": "es", "ph": "en",
    "pk": "en", "pl": "pl", "pt": "pt", "ro": "ro", "rs": "sr", "ru": "ru", "sa": "ar",
    "se": "sv", "sg": "en", "si": "sl", "sk": "sk", "th": "th", "tr": "tr", "tw": "zh",
    "ua": "uk", "us": "en", "ve": "es", "vn": "vi", "za": "en",
}  # fmt: skip
TRADITIONAL_CHINESE = frozenset({"tw", "hk", "mo"})

_SHAPE = re.compile(r"^(?P<country>[a-z]{2})(?:-(?P<language>[a-z]{2,3}))?$")


@dataclass(frozen=True, slots=True)
class Region:
    country: str  # ISO 3166-1 alpha-2, lower case
    language: str | None  # ISO 639-1, lower case, as the caller gave it; None for a bare country

    @property
    def code(self) -> str:
        """The normalised spelling: `us-en`, or `de` for a bare country."""
        return f"{self.country}-{self.language}" if self.language else self.country

    @property
    def search_language(self) -> str | None:
        """The language to search in: the one given, else the country's usual one."""
        return self.language or DEFAULT_LANGUAGE.get(self.country)


def parse_region(value: object) -> Region | None:
    """The region of a request's `region`; None for `wt-wt`. Raises InvalidRequestError."""
    if not isinstance(value, str):
        raise _invalid("must be a string like 'us-en', 'cn-zh', 'de' or 'wt-wt'")
    text = value.strip().lower().replace("_", "-")
    if text == NO_REGION:
        return None
    match = _SHAPE.match(text)
    if match is None:
        raise _invalid(f"{value[:40]!r} is not country-language like 'us-en', 'de' or 'wt-wt'")
    country = _COUNTRY_ALIASES.get(match.group("country"), match.group("country"))
    language = match.group("language")
    if language is not None:
        language = _LANGUAGE_ALIASES.get(language, language)
        if country == "kr":
            language = _KR_ALIAS.get(language, language)
    if country not in COUNTRIES:
        swapped = language is not None and language in COUNTRIES and country in LANGUAGES
        hint = f"; country comes first: '{language}-{country}'" if swapped else ""
        raise _invalid(f"{match.group('country')!r} is not an ISO 3166 country code{hint}")
    if language is not None and language not in LANGUAGES:
        raise _invalid(f"{match.group('language')!r} is not an ISO 639-1 language code")
    return Region(country, language)


def _invalid(problem: str) -> InvalidRequestError:
    return InvalidRequestError(f"region: {problem}")


# DuckDuckGo's own spellings inside `kl` (jp-jp, kr-kr, no-no, uk-en, tw-tzh).
_DDG_LANGUAGE = {"ja": "jp", "ko": "kr", "nb": "no"}


def duckduckgo_kl(region: Region) -> str | None:
    """DuckDuckGo's `kl` (`us-en`, `uk-en`, `tw-tzh`); None when no language is known."""
    language = region.search_language
    if language is None:
        return None
    country = "uk" if region.country == "gb" else region.country
    if language == "zh" and region.country in TRADITIONAL_CHINESE:
        return f"{country}-tzh"
    return f"{country}-{_DDG_LANGUAGE.get(language, language)}"


def locale_tag(region: Region) -> str | None:
    """`en-US`, `zh-CN` (Bing's `mkt`, SearXNG's `language`); None when no language is known."""
    language = region.search_language
    return f"{language}-{region.country.upper()}" if language else None


def accept_language(region: Region | None, fallback: str = "en-US,en;q=0.8") -> str:
    tag = locale_tag(region) if region else None
    if tag is None:
        return fallback
    return f"{tag},{tag.split('-')[0]};q=0.9"
