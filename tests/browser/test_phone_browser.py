"""Issue 16 in a real browser: the long job, streaming, copy and retry, sessions, phone, keyboard.

Every behaviour test runs at a phone (390x844) and a laptop (1280x800) size, in light and dark
(Playwright's ``color_scheme``); axe-core must find no serious or critical violation in each
state touched. Waits are bounded (Playwright's timeouts, ``wait_until``); nothing asserts on time.
"""

import re

import pytest

from browser.conftest import ARTIFACTS, axe_violations, no_horizontal_scroll, wait_until
from scripted_ollama import Reply, prose
from test_analysis import big_file_config, map_or_reduce

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 800}
LOOKS = [(PHONE, "light"), (PHONE, "dark"), (LAPTOP, "light"), (LAPTOP, "dark")]
LOOK_IDS = ["phone-light", "phone-dark", "laptop-light", "laptop-dark"]


@pytest.fixture
def open_page(browser):
    """A page at a size and colour scheme; ``page.requests`` records every URL it asks for."""
    contexts = []

    def start(size=PHONE, scheme="light", touch=False):
        context = browser.new_context(viewport=size, color_scheme=scheme, has_touch=touch,
                                      is_mobile=touch)
        context.set_default_timeout(15000)
        contexts.append(context)
        page = context.new_page()
        page.errors, page.requests = [], []
        page.on("pageerror", lambda exc: page.errors.append(str(exc)))
        page.on("console", lambda msg: msg.type == "error" and page.errors.append(msg.text))
        page.on("request", lambda req: page.requests.append(req.url))
        return page

    yield start
    for context in contexts:
        context.close()


def shot(page, name):
    """A screenshot under tests/artifacts; the caret is left alone (hiding it injects a style the CSP refuses)."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), caret="initial")


def tag(size, scheme):
    return f"{'phone' if size is PHONE else 'laptop'}-{scheme}"


def assert_axe_clean(page, where):
    found = axe_violations(page)
    assert found == [], (where, found)


def send(page, text):
    page.fill("#message", text)
    page.click("#send")


# -- point 1: the long job ------------------------------------------------------------------

def slow_chunks(body):
    """Map answers slow enough (about 2 s a chunk) that the clock must tick between chunks."""
    reply = map_or_reduce(body)
    if reply.text.startswith("Partial answer"):
        reply.token_delay, reply.piece_size = 0.3, 4
    return reply


@pytest.fixture
def long_job_app(tmp_path, scripted, make_live):
    scripted.script = slow_chunks
    return make_live(big_file_config(tmp_path, scripted, max_chunks=3)), scripted


@pytest.mark.parametrize("size,scheme", LOOKS, ids=LOOK_IDS)
def test_long_job_ticks_titles_and_keeps_partials(long_job_app, open_page, size, scheme):
    live, scripted = long_job_app
    page = open_page(size, scheme)
    page.goto(live.url + "/")
    send(page, "Summarize the methodology in big.md")
    card = page.locator(".card.alert")
    card.locator("textarea").wait_for()
    # the more-than-max_chunks choice: a default, and whole rows to tap
    choices = card.locator(".scope .choice")
    assert choices.count() == 2
    assert card.locator(".scope input:checked").count() == 1
    for i in range(2):
        assert choices.nth(i).bounding_box()["height"] >= 44
    no_horizontal_scroll(page)
    assert_axe_clean(page, "alert card")
    shot(page, f"phone16-alert-{tag(size, scheme)}")
    card.locator(".scope input[value=first]").check()      # (a summary is read whole by default: issue 42)
    card.locator("button[type=submit]").click()
    page.wait_for_selector(".progress-card .job-clock .elapsed")
    # the tab title follows the job
    wait_until(page, "/^\\[\\d+\\/3\\] /.test(document.title)")
    # the clock ticks while no chunk ends and nothing is asked of the server
    wait_until(page, "document.querySelector('.progress-card .job-clock .left')")
    clock = page.locator(".progress-card .job-clock")
    before_done, before_text = clock.get_attribute("data-done"), clock.locator(".elapsed").text_content()
    asked = len(page.requests)
    wait_until(page, f"(() => {{ const c = document.querySelector('.progress-card .job-clock');"
                     f" return c && c.dataset.done === {before_done!r}"
                     f" && c.querySelector('.elapsed').textContent !== {before_text!r}; }})()")
    assert page.requests[asked:] == []             # the tick is the browser's own
    assert_axe_clean(page, "progress card")
    shot(page, f"phone16-progress-{tag(size, scheme)}")
    # the end: a mark in the title, the partial answers openable, the alert's question gone
    page.wait_for_selector("text=SYNTHESIZED: the methodology is a three-phase experiment.", timeout=60000)
    wait_until(page, "document.title.startsWith('\u2713 ')")
    summary = page.locator(".analysis-summary > summary")
    marker = summary.evaluate("s => getComputedStyle(s, '::before').content")
    assert marker not in ("none", "normal", '""')
    summary.click()
    partials = page.locator(".analysis-summary details.partial")
    assert partials.count() == 3
    partials.first.locator("summary").click()
    assert "Partial answer for chunk 1." in partials.first.text_content()
    turn = page.locator("article.turn").first
    assert "Enter instructions" not in turn.text_content()
    assert "Context overflow" in turn.text_content()
    page.mouse.click(5, 5)
    wait_until(page, "!document.title.startsWith('\u2713 ')")
    no_horizontal_scroll(page)
    assert_axe_clean(page, "finished analysis")
    shot(page, f"phone16-done-{tag(size, scheme)}")
    # after a reload the same page still shows the partial answers (same server run)
    page.reload()
    page.locator(".analysis-summary > summary").click()
    assert page.locator(".analysis-summary details.partial").count() == 3
    assert page.errors == []


def test_declined_card_leaves_no_question(long_job_app, open_page):
    live, _ = long_job_app
    page = open_page(PHONE, "dark")
    page.goto(live.url + "/")
    send(page, "Summarize the methodology in big.md")
    page.locator(".card.alert textarea").wait_for()
    page.click("text=No, back to the chat")
    page.wait_for_selector("text=Chunk analysis declined: nothing was sent to the model.")
    assert "Enter instructions" not in page.locator("article.turn").first.text_content()
    summaries = page.evaluate("() => [...document.querySelectorAll('summary')].filter(s => s.offsetParent)"
                              ".map(s => getComputedStyle(s, '::before').content)")
    assert summaries and all(c not in ("none", "normal", '""') for c in summaries)
    assert_axe_clean(page, "declined card")
    assert page.errors == []


# -- point 2: streaming ---------------------------------------------------------------------

LONG_WORD = "Supercalifragilisticexpialidocious"
STREAMED = ("First a short paragraph with **bold** words.\n\n"
            "```python\ndef hello():\n    return 'hi'\n```\n\n"
            + "".join(f"Paragraph {n} of the long answer, {prose(10, seed=n)}, long enough to wrap on a phone and "
                      f"to fill the screen so that the reader can scroll up while it grows.\n\n" for n in range(40))
            + f"| name | what | where |\n|---|---|---|\n| {LONG_WORD} | {LONG_WORD}Again | "
              f"{LONG_WORD}Third |\n| b | c | d |\n\nThe end.")


@pytest.mark.parametrize("size,scheme", LOOKS, ids=LOOK_IDS)
def test_streaming_follows_only_at_the_bottom_and_renders_markdown(live, scripted, open_page, size, scheme):
    scripted.script = Reply(text=STREAMED, piece_size=24, token_delay=0.03)
    page = open_page(size, scheme)
    page.goto(live.url + "/")
    send(page, "Write a long answer")
    # Markdown appears while the reply is still arriving (at least at paragraph breaks)
    page.wait_for_selector(".msg.reply.streaming .markdown pre code")
    assert page.locator(".msg.reply.streaming .markdown strong").text_content() == "bold"
    assert "```" not in page.locator(".msg.reply.streaming .text").text_content()
    assert_axe_clean(page, "streaming reply")
    shot(page, f"phone16-streaming-{tag(size, scheme)}")
    # the reader scrolls up: the page stays there, and a "new text" button appears
    wait_until(page, "document.documentElement.scrollHeight > window.innerHeight + 200")
    page.mouse.wheel(0, -100000)
    wait_until(page, "window.scrollY < 100")
    high = page.evaluate("document.documentElement.scrollHeight")
    wait_until(page, "!document.getElementById('new-text').hidden")
    wait_until(page, f"document.documentElement.scrollHeight > {high} + 200")    # more text arrived below
    assert page.evaluate("window.scrollY") < 100                                 # and the reader stayed put
    assert page.locator("#new-text").bounding_box()["height"] >= 44
    shot(page, f"phone16-pill-{tag(size, scheme)}")
    assert_axe_clean(page, "new text pill")
    page.click("#new-text")
    wait_until(page, "document.getElementById('new-text').hidden")
    wait_until(page, "document.documentElement.scrollHeight - window.scrollY - window.innerHeight < 80")
    # at the bottom, it follows to the end
    page.wait_for_selector(".msg.reply:not(.streaming) .markdown .table-scroll table")
    wait_until(page, "document.documentElement.scrollHeight - window.scrollY - window.innerHeight < 80")
    # tables scroll sideways; words in cells are not broken
    whole = page.evaluate(f"""() => [...document.querySelectorAll('.markdown td')]
        .filter(td => td.textContent.startsWith({LONG_WORD!r}))
        .map(td => {{ const r = document.createRange(); r.selectNodeContents(td);
                     return r.getClientRects().length; }})""")
    assert whole == [1, 1, 1]
    if size is PHONE:
        assert page.evaluate("(() => { const s = document.querySelector('.table-scroll');"
                             " return s.scrollWidth > s.clientWidth; })()")
    no_horizontal_scroll(page)
    assert_axe_clean(page, "finished reply")
    assert page.errors == []


# -- point 3: copy, highlighting, Re-send ---------------------------------------------------

CODE_REPLY = "Try this:\n\n```python\ndef add(a, b):\n    return a + b  # sum\n```\n\nThen call `add(1, 2)`."


@pytest.mark.parametrize("size,scheme", LOOKS, ids=LOOK_IDS)
def test_code_is_highlighted_focusable_and_copied(live, scripted, open_page, size, scheme):
    scripted.script = Reply(text=CODE_REPLY, piece_size=8, token_delay=0.01)
    page = open_page(size, scheme)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live.url)
    page.goto(live.url + "/")
    send(page, "Show me code")
    block = page.locator(".msg.reply:not(.streaming) .code")
    block.wait_for()
    # highlighted on the server: Pygments' token classes, no script did it
    assert block.locator("span.k").first.text_content() == "def"
    assert block.locator("span.c1").text_content() == "# sum"
    # a code block is reachable from the keyboard
    assert block.locator("pre").get_attribute("tabindex") == "0"
    block.locator("pre").focus()
    assert page.evaluate("document.activeElement.tagName") == "PRE"
    copy = block.locator("button.copy")
    assert copy.bounding_box()["height"] >= 44
    copy.click()
    page.wait_for_selector(".code button.copy.done")
    assert page.evaluate("navigator.clipboard.readText()") == "def add(a, b):\n    return a + b  # sum\n"
    page.click("text=Copy reply")
    wait_until(page, "document.querySelector('.reply-tools .copy').textContent === 'Copied'")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("Try this:") and "return a + b" in copied and "Copy" not in copied
    no_horizontal_scroll(page)
    assert_axe_clean(page, "reply with code")
    shot(page, f"phone16-code-{tag(size, scheme)}")
    assert page.errors == []


def test_copy_falls_back_without_a_clipboard_api(live, scripted, open_page):
    scripted.script = Reply(text=CODE_REPLY)
    page = open_page(PHONE, "light")
    # plain http on a LAN: no navigator.clipboard; record what execCommand("copy") copies
    page.add_init_script("""Object.defineProperty(navigator, 'clipboard', {value: undefined});
        window.copied = [];
        const exec = document.execCommand.bind(document);
        document.execCommand = (cmd) => { window.copied.push(document.activeElement.value); return exec(cmd); };""")
    page.goto(live.url + "/")
    send(page, "Show me code")
    page.locator(".msg.reply:not(.streaming) .code button.copy").click()
    wait_until(page, "window.copied.length === 1")
    assert page.evaluate("window.copied[0]") == "def add(a, b):\n    return a + b  # sum\n"
    assert page.errors == []


@pytest.mark.parametrize("size,scheme", LOOKS, ids=LOOK_IDS)
def test_resend_replaces_the_failed_turn(live, scripted, open_page, size, scheme):
    calls = []

    def first_fails(body):
        calls.append(body)
        return Reply(text="boom", fault="http_500") if len(calls) == 1 else Reply(text="It worked this time.")

    scripted.script = first_fails
    page = open_page(size, scheme)
    page.goto(live.url + "/")
    name = page.url.rsplit("/", 1)[-1]
    send(page, "Please answer")
    page.wait_for_selector(".card.error")
    assert_axe_clean(page, "error card")
    shot(page, f"phone16-error-{tag(size, scheme)}")
    page.click("text=Re-send this message")
    # the reply as recorded (the streamed text shows a moment before the turn is written)
    page.wait_for_selector(".msg.reply:not(.streaming) >> text=It worked this time.")
    assert page.locator("article.turn").count() == 1
    assert page.locator(".card.error").count() == 0
    turns = live.services.store.load(name).turns
    assert [t.user_text for t in turns] == ["Please answer"] and turns[0].reply == "It worked this time."
    page.reload()
    assert page.locator("article.turn").count() == 1
    assert page.errors == []


# -- point 4: sessions -----------------------------------------------------------------------

FIRST = "How do I make the Pi's fan quieter without letting it overheat at night, please?"


@pytest.mark.parametrize("size,scheme", LOOKS, ids=LOOK_IDS)
def test_session_title_from_first_message_and_rename_on_blur(live, scripted, open_page, size, scheme):
    from datetime import datetime

    from test_session_pages import write_session

    page = open_page(size, scheme)
    page.goto(live.url + "/")
    name = page.url.rsplit("/", 1)[-1]
    send(page, FIRST)
    page.wait_for_selector(".msg.reply:not(.streaming)")
    expected = "How do I make the Pi's fan quieter without letting it…"
    assert page.input_value("#title") == expected
    wait_until(page, f"document.title.startsWith({expected!r})")
    assert live.services.store.load(name).title == expected          # no model call made it
    send(page, "And in summer?")
    page.wait_for_selector("article.turn:nth-of-type(2) .msg.reply:not(.streaming)")
    assert page.input_value("#title") == expected                     # only the first message names it
    assert len(scripted.chats()) == 2                                  # one model call per message, none for the title
    # a rename is saved when the field loses focus, without Enter
    page.fill("#title", "Fan notes")
    with page.expect_response(lambda r: r.url.endswith("/title")):
        page.locator("#message").click()
    assert live.services.store.load(name).title == "Fan notes"
    page.reload()
    assert page.input_value("#title") == "Fan notes"
    assert_axe_clean(page, "named session")
    # the list shows each model once, however a turn names it
    write_session(live.services.store, datetime(2026, 11, 1, 9, 0),
                  [("a", "b", "llama3.1:8b"), ("c", "d", "LLAMA3.1")], title="Two spellings")
    page.goto(live.url + "/sessions/")
    item = page.locator(".session-item", has_text="Two spellings")
    meta = item.locator(".meta").text_content()
    assert "llama3.1:8b" in meta and "LLAMA3.1" not in meta
    assert page.locator(".session-item", has_text="Fan notes").count() == 1
    no_horizontal_scroll(page)
    assert_axe_clean(page, "session list")
    shot(page, f"phone16-sessions-{tag(size, scheme)}")
    assert page.errors == []


# -- point 5: phone --------------------------------------------------------------------------

def test_on_a_touch_screen_enter_adds_a_line_and_send_sends(live, scripted, open_page):
    page = open_page(PHONE, "light", touch=True)
    page.goto(live.url + "/")
    assert page.evaluate("matchMedia('(pointer: coarse)').matches")
    page.locator("#message").tap()
    page.keyboard.type("line one")
    page.keyboard.press("Enter")
    page.keyboard.type("line two")
    assert page.input_value("#message") == "line one\nline two"
    assert page.locator("article.turn").count() == 0 and scripted.chats() == []
    assert page.get_attribute("#message", "enterkeyhint") == "enter"
    page.locator("#send").tap()
    page.wait_for_selector(".msg.user >> text=line two")
    assert page.errors == []


@pytest.mark.parametrize("size,scheme", LOOKS, ids=LOOK_IDS)
def test_one_row_header_with_a_menu_and_a_home_screen_manifest(tmp_path, scripted, make_live, open_page,
                                                               size, scheme):
    import dataclasses

    from app.auth import set_password
    from conftest import make_config

    config = dataclasses.replace(make_config(tmp_path, scripted.url), auth="password")
    set_password(config.data_path, "correct horse battery")
    live = make_live(config)
    page = open_page(size, scheme)
    page.goto(live.url + "/")
    page.fill("input[type=password]", "correct horse battery")
    page.click("button[type=submit]")
    page.wait_for_selector("#message")
    # one row, however much the header holds (Sign out included)
    tops = page.evaluate("() => [...document.querySelector('.topbar').children].map(e => e.getBoundingClientRect().top)")
    assert max(tops) - min(tops) < 10, tops
    header = page.locator(".topbar").bounding_box()["height"]
    dock = page.locator(".dock").bounding_box()["height"]
    assert header < 64 and header + dock < size["height"] / 3, (header, dock)
    no_horizontal_scroll(page)
    page.click("#menu summary")
    items = page.locator("#menu .menu-items .button")
    assert [items.nth(i).text_content().strip() for i in range(items.count())] == ["Sessions", "Files", "Sign out"]
    assert all(items.nth(i).bounding_box()["height"] >= 44 for i in range(items.count()))
    no_horizontal_scroll(page)
    assert_axe_clean(page, "header menu open")
    shot(page, f"phone16-menu-{tag(size, scheme)}")
    page.keyboard.press("Escape")
    assert not page.locator("#menu").evaluate("m => m.open")
    # the home-screen manifest and its icons
    manifest_url = page.locator("link[rel=manifest]").evaluate("l => l.href")
    manifest = page.request.get(manifest_url).json()
    assert manifest["display"] == "standalone" and manifest["start_url"] == "/"
    sizes = {icon["sizes"] for icon in manifest["icons"]}
    assert {"192x192", "512x512"} <= sizes
    for icon in manifest["icons"]:
        response = page.request.get(manifest_url.rsplit("/", 1)[0] + "/" + icon["src"])
        assert response.ok and response.headers["content-type"].startswith("image/")
    assert page.locator("link[rel=apple-touch-icon]").count() == 1
    assert page.errors == []


# -- point 6: keyboard and screen readers -----------------------------------------------------

def active(page):
    """Where focus is: the closest card or message's class, and the element's tag."""
    return page.evaluate("""() => { const a = document.activeElement;
        const box = a.closest('.card, .msg');
        return [a.tagName, box ? box.className : '']; }""")


@pytest.mark.parametrize("size,scheme", [(PHONE, "dark"), (LAPTOP, "light")], ids=["phone-dark", "laptop-light"])
def test_focus_follows_start_and_cancel_and_states_are_announced(long_job_app, open_page, size, scheme):
    live, _ = long_job_app
    page = open_page(size, scheme)
    page.goto(live.url + "/")
    assert page.get_attribute("#conversation", "aria-live") is None     # the conversation is not a live region
    assert page.get_attribute("#announce", "role") == "status"
    send(page, "Summarize the methodology in big.md")
    page.locator(".card.alert textarea").wait_for()
    page.locator(".card.alert button[type=submit]").focus()
    page.keyboard.press("Enter")                                        # Start, from the keyboard
    page.wait_for_selector(".progress-card")
    wait_until(page, "document.activeElement.closest('.progress-card')")
    assert active(page)[0] == "H2"
    wait_until(page, "document.getElementById('announce').textContent.length > 0")
    assert page.locator(".progress-card .stage").get_attribute("role") is None
    page.locator(".progress-card button.danger").focus()
    page.keyboard.press("Enter")                                        # Cancel
    page.wait_for_selector("text=Synthesize the partial answers")
    wait_until(page, "document.activeElement.closest('.card.alert') && document.activeElement.tagName === 'H2'")
    wait_until(page, "/stopped/.test(document.getElementById('announce').textContent)")
    assert_axe_clean(page, "choice after cancel")
    page.click("text=Drop them")
    wait_until(page, "!document.querySelector('.card.alert')")
    assert page.errors == []


@pytest.mark.parametrize("size,scheme", LOOKS, ids=LOOK_IDS)
def test_esc_stops_a_reply_focus_follows_stop_and_code_is_reachable(live, scripted, open_page, size, scheme):
    scripted.script = Reply(text="```\n" + "code line\n" * 5 + "```\n\n" + prose(400), piece_size=5,
                            token_delay=0.03)
    page = open_page(size, scheme)
    page.goto(live.url + "/")
    page.fill("#message", "Go on")
    page.press("#message", "Enter")
    page.wait_for_selector(".msg.reply.streaming .markdown pre")
    wait_until(page, "document.getElementById('announce').textContent === 'Reply started.'")
    assert "slow" not in page.text_content("#announce")               # states, not tokens
    assert_axe_clean(page, "streaming")
    page.keyboard.press("Escape")                                       # Esc stops the reply
    page.wait_for_selector("text=Stopped: the reply above is what arrived.")
    wait_until(page, "document.getElementById('announce').textContent === 'Reply stopped.'")
    # code blocks are reached with Tab: from the Copy button, the next stop is the block itself
    page.locator(".code button.copy").first.focus()
    page.keyboard.press("Tab")
    assert active(page)[0] == "PRE"
    # Stop from the keyboard: focus goes to the reply that stopped, not to <body>
    page.fill("#message", "Again")
    page.press("#message", "Enter")
    page.wait_for_selector("article.turn:nth-of-type(2) .msg.reply.streaming button.stop")
    wait_until(page, "document.querySelector('article.turn:nth-of-type(2) .msg.reply.streaming .text')"
                     "?.textContent.length > 10")
    page.locator("button.stop").focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("article.turn:nth-of-type(2) .msg.reply.stopped")
    wait_until(page, "document.activeElement.closest('article.turn:nth-of-type(2)')")
    assert "reply" in active(page)[1]
    assert_axe_clean(page, "stopped reply")
    shot(page, f"phone16-stopped-{tag(size, scheme)}")
    assert page.errors == []


# -- page weight ------------------------------------------------------------------------------

@pytest.mark.parametrize("size,scheme", [(PHONE, "light"), (LAPTOP, "dark")], ids=["phone-light", "laptop-dark"])
def test_chat_page_first_load_is_under_150_kb(live, open_page, size, scheme):
    page = open_page(size, scheme)
    page.goto(live.url + "/")
    page.wait_for_load_state("load")
    wait_until(page, "window.htmx")
    sizes = page.evaluate("""() => [...performance.getEntriesByType('navigation'),
                                    ...performance.getEntriesByType('resource')]
                                   .map(e => [e.name, e.transferSize])""")
    total = sum(size for _, size in sizes)
    assert any(name.endswith("htmx-2.0.11.min.js") and size > 0 for name, size in sizes)   # counted, not cached
    assert total < 150 * 1024, sizes


# -- extra: regenerate and edit-and-resend --------------------------------------------------

@pytest.mark.parametrize("size,scheme", LOOKS, ids=LOOK_IDS)
def test_regenerate_and_edit_the_last_turn(live, scripted, open_page, size, scheme):
    answers = iter(["First answer.", "Second answer.", "Edited answer."])
    scripted.script = lambda body: Reply(text=next(answers))
    page = open_page(size, scheme)
    page.goto(live.url + "/")
    name = page.url.rsplit("/", 1)[-1]
    send(page, "What is a Pi?")
    page.wait_for_selector(".msg.reply:not(.streaming) >> text=First answer.")
    page.click("article.turn:last-of-type button.regen")
    page.wait_for_selector(".msg.reply:not(.streaming) >> text=Second answer.")
    assert "Regenerated" in page.locator("article.turn:last-of-type .notice").text_content()
    assert not page.locator("article.turn:first-of-type button.regen").is_visible()   # only the last turn
    sent = [m["content"] for m in scripted.chats()[-1].body["messages"]]
    assert "First answer." not in sent and sent[-1] == "What is a Pi?"
    assert_axe_clean(page, "regenerated")
    page.click("article.turn:last-of-type button.edit-last")
    assert page.input_value("#message") == "What is a Pi?"
    assert page.locator("#editing").is_visible()
    assert page.evaluate("document.activeElement.id") == "message"
    page.fill("#message", "What is a Raspberry Pi?")
    page.click("#send")
    page.wait_for_selector(".msg.reply:not(.streaming) >> text=Edited answer.")
    assert not page.locator("#editing").is_visible()
    sent = [m["content"] for m in scripted.chats()[-1].body["messages"]]
    assert sent[-1] == "What is a Raspberry Pi?"
    assert not {"First answer.", "Second answer.", "What is a Pi?"} & set(sent)
    # the session file keeps every attempt, in order
    turns = live.services.store.load(name).turns
    assert [t.reply for t in turns] == ["First answer.", "Second answer.", "Edited answer."]
    shot(page, f"phone16-edited-{tag(size, scheme)}")
    assert_axe_clean(page, "edited")
    assert page.errors == []


# -- extra: file chips and "did you mean" ---------------------------------------------------

@pytest.mark.parametrize("size,scheme", [(PHONE, "dark"), (LAPTOP, "light")], ids=["phone-dark", "laptop-light"])
def test_file_chips_and_did_you_mean(tmp_path, scripted, make_live, open_page, size, scheme):
    from pathlib import Path

    from conftest import make_config

    config = make_config(tmp_path, scripted.url)
    Path(config.workspace).mkdir(parents=True)
    (Path(config.workspace) / "notes.md").write_text("# Notes\n\nThe fan is loud at night.\n")
    live = make_live(config)
    page = open_page(size, scheme)
    page.goto(live.url + "/")
    send(page, "What does notes.md say? And nots.md?")
    card = page.locator(".card.error")         # a misspelt name is not sent (issue 33): one tap sends the match
    card.wait_for()
    assert "did you mean “notes.md”?" in card.text_content() and scripted.chats() == []
    assert card.locator("text=Re-send this message").count() == 0
    card.locator("button", has_text="Send with notes.md").click()
    page.wait_for_selector(".msg.reply:not(.streaming)")
    chip = page.locator("article.turn .chips .chip")
    assert chip.count() == 1 and re.fullmatch(r"notes\.md · \d+ tokens", chip.text_content())
    assert page.locator(".card.error").count() == 0 and page.locator("article.turn").count() == 1
    page.reload()                                              # recorded in the session, not only shown
    assert page.locator("article.turn .chips .chip").count() == 1
    no_horizontal_scroll(page)
    assert_axe_clean(page, "file chips")
    assert page.errors == []


@pytest.mark.parametrize("size,scheme", [(PHONE, "light"), (LAPTOP, "dark")], ids=["phone-light", "laptop-dark"])
def test_attach_uploads_into_the_workspace_and_names_the_file(live, scripted, open_page, size, scheme):
    from pathlib import Path

    page = open_page(size, scheme)
    page.goto(live.url + "/")
    attach = page.locator(".attach label")
    assert attach.bounding_box()["height"] >= 44
    page.fill("#message", "Summarize")
    page.set_input_files("#attach-file", files=[{"name": "pi-notes.md", "mimeType": "text/markdown",
                                                  "buffer": b"# Pi\n\nThe fan is loud.\n"}])
    page.wait_for_selector("#attach-status >> text=Attached pi-notes.md")
    assert page.input_value("#message") == "Summarize pi-notes.md "
    assert (Path(live.config.workspace) / "pi-notes.md").read_bytes() == b"# Pi\n\nThe fan is loud.\n"
    assert page.evaluate("document.activeElement.id") == "message"
    no_horizontal_scroll(page)
    assert_axe_clean(page, "attached")
    shot(page, f"phone16-attach-{tag(size, scheme)}")
    page.click("#send")
    page.wait_for_selector("article.turn .chips >> text=pi-notes.md")
    # the session's watch stream may show the turn before the send's own answer ends (issue 45): the note
    # goes when the send is answered, as the box is emptied
    wait_until(page, "document.getElementById('message').value === ''")
    assert not page.locator("#attach-status").is_visible()
    assert page.errors == []


@pytest.mark.parametrize("size,scheme", [(PHONE, "light"), (LAPTOP, "dark")], ids=["phone-light", "laptop-dark"])
def test_composer_says_an_analysis_is_running(long_job_app, open_page, size, scheme):
    live, _ = long_job_app
    page = open_page(size, scheme)
    page.goto(live.url + "/")
    send(page, "Summarize the methodology in big.md")
    page.locator(".card.alert button[type=submit]").click()
    page.wait_for_selector(".progress-card")
    assert page.locator("#send").is_disabled() and page.locator("#send").text_content() == "Analysis running…"
    page.reload()                                         # the page load says so too
    assert page.locator("#send").text_content() == "Analysis running…"
    assert_axe_clean(page, "composer during analysis")
    page.wait_for_selector("text=SYNTHESIZED: the methodology is a three-phase experiment.", timeout=60000)
    wait_until(page, "!document.getElementById('send').disabled")
    assert page.locator("#send").text_content() == "Send"
    assert page.errors == []


def test_an_ollama_outage_shows_in_the_status_line_on_page_load(live, scripted, open_page):
    page = open_page(PHONE, "dark")
    page.goto(live.url + "/")
    assert page.locator("#status .problem").count() == 0
    scripted.down = True                              # Ollama answers 503; the model's facts stay cached
    live.services.models.forget_models()               # (and the model list's few-second cache is over)
    page.reload()
    problem = page.locator("#status summary .problem")
    assert problem.count() == 1 and problem.text_content().strip(" ·")
    assert_axe_clean(page, "status with a problem")
    assert page.errors == []


@pytest.mark.parametrize("size,scheme", [(PHONE, "light"), (LAPTOP, "dark")], ids=["phone-light", "laptop-dark"])
def test_ask_about_it_focuses_the_box_and_a_shortcut_starts_a_new_chat(tmp_path, scripted, make_live, open_page,
                                                                        size, scheme):
    from pathlib import Path

    from conftest import make_config

    config = make_config(tmp_path, scripted.url)
    Path(config.workspace).mkdir(parents=True)
    (Path(config.workspace) / "notes.md").write_text("# Notes\n")
    live = make_live(config)
    page = open_page(size, scheme)
    page.goto(live.url + "/")
    first = page.url
    page.click("#menu summary")
    page.click("#menu >> text=Files")
    page.click("text=Ask about it")
    page.wait_for_selector("#message")
    assert page.evaluate("document.activeElement.id") == "message"
    assert page.input_value("#message") == "About notes.md: "
    assert page.evaluate("document.activeElement.selectionStart") == len("About notes.md: ")
    page.keyboard.press("Control+Shift+O")
    page.wait_for_url(lambda url: "/s/" in url and "draft" not in url and url != first)
    assert live.services.store.names()[0] == page.url.rsplit("/", 1)[-1] != first.rsplit("/", 1)[-1]
    assert page.locator("article.turn").count() == 0
    assert page.errors == []
