"""WebShop adapter: page parsing on hand-written fixtures, action handling, full episodes against
a tiny local HTTP site that serves the fixtures by WebShop's routes, failures, and the D.1
partition builder."""

from __future__ import annotations

import ast
import json
import re
import socket
import threading
import time
import urllib.parse
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from antipersist_lib.envs import make_env
from antipersist_lib.envs.partitions import PARTITION_SEED, load_partition, save_partition
from antipersist_lib.envs.webshop.client import WebShopEnvironment
from antipersist_lib.envs.webshop.goals import (
    PAPER_N_GOALS,
    build_webshop_partition,
    draw_webshop_split,
    load_webshop_goals,
)
from antipersist_lib.envs.webshop.pages import parse_page, parse_webshop_action
from antipersist_lib.errors import BenchmarkUnavailableError, InfrastructureError
from antipersist_lib.records import Task

FIXTURES = Path(__file__).parent / "fixtures" / "webshop"
INSTRUCTION = "i need a blue ceramic coffee mug in 12 oz, and price lower than 20.00 dollars"
GOOD_ASIN, OTHER_ASIN = "B0MUG00001", "B0CUP00002"
GOOD_OPTIONS = {"color": "blue", "size": "12 oz"}


def fixture(name: str, **subs: str) -> str:
    html = (FIXTURES / name).read_text(encoding="utf-8")
    defaults = {
        "SESSION": "fixed_0",
        "KEYWORDS": "blue%20mug",
        "PAGE": "1",
        "NEXTPAGE": "2",
        "REWARD": "1.0",
        "ASIN": GOOD_ASIN,
    }
    defaults.update(subs)
    for k, v in defaults.items():
        html = html.replace(f"__{k}__", v)
    return render_options(html, {})


def enc_options(opts: dict) -> str:
    return urllib.parse.quote(str(opts), safe="")


def render_options(html: str, opts: dict) -> str:
    """``__OPTS__`` -> current options, ``__OPTS+name=value__`` -> options with name=value set."""

    def upd(m: re.Match) -> str:
        new = dict(opts)
        new[m.group(1)] = m.group(2)
        return enc_options(new)

    html = re.sub(r"__OPTS\+([^=_]+)=([^_]+)__", upd, html)
    return html.replace("__OPTS__", enc_options(opts))


# -- a tiny WebShop-shaped site ------------------------------------------------------------


class FakeWebShop:
    """Serves the fixtures on WebShop's routes; rewards 1.0 for the mug in blue / 12 oz."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.sessions: set[str] = set()
        self.fail_prefix: str | None = None
        self.index_body: str | None = None  # override the index page (e.g. a non-WebShop page)
        self.delay: tuple[str, float] | None = None  # (path prefix, seconds) to answer slowly
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                pass

            def do_GET(self):
                outer.handle(self, "GET", b"")

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                outer.handle(self, "POST", self.rfile.read(n) if n else b"")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> FakeWebShop:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @staticmethod
    def send(h: BaseHTTPRequestHandler, code: int, body: str = "", location: str | None = None) -> None:
        data = body.encode("utf-8")
        h.send_response(code)
        h.send_header("Content-Type", "text/html; charset=utf-8")
        h.send_header("Content-Length", str(len(data)))
        if location:
            h.send_header("Location", location)
        h.end_headers()
        h.wfile.write(data)

    def handle(self, h: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        path = urllib.parse.urlsplit(h.path).path
        self.requests.append((method, path))
        if self.delay and path.startswith(self.delay[0]):
            time.sleep(self.delay[1])
        if self.fail_prefix and path.startswith(self.fail_prefix):
            return self.send(h, 500, "<h1>Internal Server Error</h1>")
        seg = path.split("/")[1:]
        try:
            if len(seg) == 1:
                sid = urllib.parse.unquote(seg[0])
                self.sessions.add(sid)
                form = urllib.parse.parse_qs(body.decode("utf-8"))
                if method == "POST" and "search_query" in form:
                    words = form["search_query"][0].lower().split(" ")
                    kw = urllib.parse.quote(str(words), safe="")
                    return self.send(h, 302, "", location=f"/search_results/{seg[0]}/{kw}/1")
                if self.index_body is not None:
                    return self.send(h, 200, self.index_body)
                return self.send(h, 200, self.page("index.html", seg[0]))
            sid = urllib.parse.unquote(seg[1])
            if sid not in self.sessions:  # the real site raises KeyError -> 500
                return self.send(h, 500, "<h1>Internal Server Error</h1>")
            route = seg[0]
            if route == "search_results":
                _, _, kw, page = seg
                return self.send(
                    h, 200, self.page("results.html", seg[1], KEYWORDS=kw, PAGE=page, NEXTPAGE=str(int(page) + 1))
                )
            if route == "item_page":
                _, _, asin, kw, page, opts = seg
                name = "item_mug.html" if asin == GOOD_ASIN else "item_cup.html"
                return self.send(h, 200, self.page(name, seg[1], opts=opts, KEYWORDS=kw, PAGE=page))
            if route == "item_sub_page":
                _, _, asin, kw, page, _sub, opts = seg
                return self.send(
                    h, 200, self.page("description.html", seg[1], opts=opts, KEYWORDS=kw, PAGE=page, ASIN=asin)
                )
            if route == "done":
                _, _, asin, opts = seg
                chosen = ast.literal_eval(urllib.parse.unquote(opts))
                reward = 1.0 if asin == GOOD_ASIN and chosen == GOOD_OPTIONS else 0.5 if asin == GOOD_ASIN else 0.1
                return self.send(h, 200, self.page("done.html", seg[1], ASIN=asin, REWARD=repr(reward)))
        except (ValueError, SyntaxError):
            return self.send(h, 500, "<h1>Internal Server Error</h1>")
        return self.send(h, 404, "<h1>Not Found</h1>")

    def page(self, name: str, session_seg: str, opts: str = "%7B%7D", **subs: str) -> str:
        html = (FIXTURES / name).read_text(encoding="utf-8").replace("__SESSION__", session_seg)
        for k, v in subs.items():
            html = html.replace(f"__{k}__", v)
        return render_options(html, ast.literal_eval(urllib.parse.unquote(opts)))


@pytest.fixture
def site():
    s = FakeWebShop().start()
    yield s
    s.stop()


@pytest.fixture
def env(site):
    e = WebShopEnvironment(site.base_url, timeout_s=5)
    yield e
    e.close()


def url_options(url: str) -> dict:
    return ast.literal_eval(urllib.parse.unquote(url.rsplit("/", 1)[1]))


def goal_task(i: int = 0, instruction: str = "") -> Task:
    return Task(
        task_id=i,
        benchmark="webshop",
        task_type="webshop",
        instruction=instruction,
        split="heldout",
        env_args={"goal_index": i},
    )


# -- parsing -------------------------------------------------------------------------------


def test_parse_index_page():
    p = parse_page(fixture("index.html"))
    assert p.kind == "index"
    assert p.instruction == INSTRUCTION
    assert p.has_search and p.search_url == "/fixed_0" and p.search_field == "search_query"
    assert p.text_observation == f"WebShop [SEP] Instruction: [SEP] {INSTRUCTION} [SEP] Search"
    assert p.clickables == ()  # the Search button is not a click target
    assert p.reward is None


def test_parse_results_page():
    p = parse_page(fixture("results.html"))
    assert p.kind == "results" and not p.has_search
    assert p.instruction == INSTRUCTION
    assert p.text_observation == (
        f"Instruction: [SEP] {INSTRUCTION} [SEP] Back to Search [SEP] Page 1 (Total results: 2) [SEP] Next > "
        f"[SEP] {GOOD_ASIN} [SEP] Ceramic Coffee Mug, Dishwasher Safe [SEP] $12.99 "
        f"[SEP] {OTHER_ASIN} [SEP] Stainless Travel Cup [SEP] $8.50 to $10.00"
    )
    assert "Kitchen" not in p.text_observation  # commented-out markup is not text
    assert p.clickable_labels == ["Back to Search", "Next >", GOOD_ASIN, OTHER_ASIN]
    link = p.clickable(GOOD_ASIN.lower())
    assert link.kind == "product" and link.url == f"/item_page/fixed_0/{GOOD_ASIN}/blue%20mug/1/%7B%7D"
    assert p.clickable("next >").method == "post"


def test_parse_item_page():
    p = parse_page(fixture("item_mug.html"))
    assert p.kind == "item"
    assert p.clickable_labels == [
        "Back to Search",
        "< Prev",
        "blue",
        "red",
        "12 oz",
        "16 oz",
        "Description",
        "Features",
        "Reviews",
        "Buy Now",
    ]
    opt = p.clickable("12  OZ")
    assert opt.kind == "option" and opt.url.endswith(enc_options({"size": "12 oz"}))
    assert p.clickable("buy now").url == f"/done/fixed_0/{GOOD_ASIN}/%7B%7D"
    assert "console.log" not in p.text_observation  # script text is not visible
    assert p.text_observation.startswith(
        f"Instruction: [SEP] {INSTRUCTION} [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] blue"
    )
    assert p.text_observation.endswith("Description [SEP] Features [SEP] Reviews [SEP] Buy Now")


def test_parse_sub_and_done_pages():
    sub = parse_page(fixture("description.html"))
    assert sub.kind == "sub" and sub.clickable_labels == ["Back to Search", "< Prev"]
    assert "keeps coffee warm" in sub.text_observation
    done = parse_page(fixture("done.html", REWARD="0.6666666666666666"))
    assert done.kind == "done"
    assert done.reward == pytest.approx(2 / 3)
    assert done.text_observation == (
        "Thank you for shopping with us! [SEP] Your code: [SEP] A1B2C3D4E5 [SEP] (Paste it in your MTurk interface.) "
        "[SEP] Your score (min 0.0, max 1.0) [SEP] 0.6666666666666666"
    )
    # the hidden target block and reward details never reach the agent
    assert "Target" not in done.text_observation and "r_type" not in done.text_observation


def test_parse_unknown_page():
    assert parse_page("<html><body><p>It works!</p></body></html>").kind == "unknown"


def test_parse_action():
    assert parse_webshop_action("Click[Buy Now]") == ("click", "Buy Now")
    assert parse_webshop_action("  SEARCH [  blue   ceramic mug ] ") == ("search", "blue ceramic mug")
    assert parse_webshop_action("click [< Prev]") == ("click", "< Prev")
    assert parse_webshop_action("buy the mug") is None
    assert parse_webshop_action("click Buy Now") is None
    e = WebShopEnvironment("http://127.0.0.1:9")
    assert e.normalize_action("Click [ Buy  Now ]") == "click[Buy Now]"
    assert e.normalize_action("  look around ") == "look around"


# -- episodes against the local site -------------------------------------------------------


def test_reset_opens_goal_session(site, env):
    obs = env.reset(goal_task(7, instruction="I need a blue ceramic coffee mug in 12 oz."))
    assert obs == f"WebShop [SEP] Instruction: [SEP] {INSTRUCTION} [SEP] Search"
    (sid,) = site.sessions
    assert sid.startswith("antipersist-") and sid.endswith("_fixed_7")
    assert int(sid.split("_")[-1]) == 7 and "fixed" in sid  # how the site picks the goal
    assert env.valid_actions() == ["search[<query>]"]
    assert not env.instruction_mismatch
    assert env.success is False and env.score == 0.0


def test_plain_fixed_session_and_instruction_mismatch(site):
    with WebShopEnvironment(site.base_url, session_prefix="") as e:
        e.reset(goal_task(3, instruction="a completely different goal"))
        assert site.sessions == {"fixed_3"}
        assert e.instruction_mismatch


def test_full_episode_success(site, env):
    env.reset(goal_task(0))
    r = env.step("search[Blue Ceramic Mug]")
    assert r.valid and not r.done and r.info["page"] == "results"
    assert ("POST", "/" + urllib.parse.quote(next(iter(site.sessions)))) in site.requests
    assert "click[Next >]" in env.valid_actions() and "search[<query>]" not in env.valid_actions()
    r = env.step(f"click[{GOOD_ASIN.lower()}]")  # ASINs are matched case-insensitively
    assert r.valid and r.info["page"] == "item" and "Ceramic Coffee Mug" in r.observation
    r = env.step("click[12 oz]")
    assert r.valid and url_options(r.info["url"]) == {"size": "12 oz"}
    r = env.step("click[Blue]")  # keeps the size chosen before
    assert r.valid and url_options(r.info["url"]) == GOOD_OPTIONS
    r = env.step("click[Description]")
    assert r.valid and r.info["page"] == "sub" and "keeps coffee warm" in r.observation
    r = env.step("click[< Prev]")  # back to the item page, options still chosen
    assert r.valid and r.info["page"] == "item" and url_options(r.info["url"]) == GOOD_OPTIONS
    r = env.step("Click[Buy Now]")
    assert r.done and r.valid and r.reward == 1.0
    assert "Your score (min 0.0, max 1.0) [SEP] 1.0" in r.observation
    assert env.success is True and env.score == 1.0
    assert env.episode_stats.steps == 7 and env.episode_stats.invalid == 0
    after = env.step("click[Back to Search]")
    assert not after.valid and after.done


def test_wrong_purchase_fails(site, env):
    env.reset(goal_task(0))
    env.step("search[mug]")
    env.step(f"click[{OTHER_ASIN}]")
    r = env.step("click[buy now]")
    assert r.done and r.reward == pytest.approx(0.1)
    assert env.success is False and env.score == pytest.approx(0.1)


def test_right_item_without_options_is_partial(site, env):
    env.reset(goal_task(0))
    env.step("search[mug]")
    env.step(f"click[{GOOD_ASIN}]")
    r = env.step("click[Buy Now]")
    assert r.reward == 0.5 and env.success is False


def test_invalid_actions_make_no_request(site, env):
    env.reset(goal_task(0))
    n = len(site.requests)
    r = env.step("click[Buy Now]")  # not on the search page
    assert not r.valid and "no 'Buy Now' to click" in r.observation and "search[<query>]" in r.observation
    r = env.step("click[search]")
    assert not r.valid and "search[query]" in r.observation
    r = env.step("search[]")
    assert not r.valid
    r = env.step("go to the kitchen")
    assert not r.valid and "search[query] or click[X]" in r.observation
    assert len(site.requests) == n
    env.step("search[mug]")
    env.step(f"click[{GOOD_ASIN}]")
    n = len(site.requests)
    r = env.step("search[another mug]")  # search is not available on an item page
    assert not r.valid and "click[Back to Search]" in r.observation
    r = env.step("click[purple]")
    assert not r.valid and "click[blue]" in r.observation
    assert len(site.requests) == n
    assert env.episode_stats.invalid == 6 and env.episode_stats.valid == 2
    r = env.step("click[Back to Search]")
    assert r.valid and r.info["page"] == "index" and env.valid_actions() == ["search[<query>]"]


def test_server_error_mid_episode_is_infrastructure(site, env):
    env.reset(goal_task(0))
    env.step("search[mug]")
    site.fail_prefix = "/item_page"
    with pytest.raises(InfrastructureError, match="HTTP 500"):
        env.step(f"click[{GOOD_ASIN}]")


def test_timeout_is_infrastructure(site):
    with WebShopEnvironment(site.base_url, timeout_s=0.3, startup_timeout_s=5) as e:
        site.delay = ("/", 0.6)  # slower than timeout_s, within the first request's allowance
        e.reset(goal_task(0))
        with pytest.raises(InfrastructureError, match="timed out"):
            e.step("search[mug]")
        site.delay = None


def test_non_webshop_page_is_infrastructure(site, env):
    site.index_body = "<html><body><p>It works!</p></body></html>"
    with pytest.raises(InfrastructureError, match="unrecognised WebShop page"):
        env.reset(goal_task(0))


def test_server_gone_mid_episode_is_infrastructure(site, env):
    env.reset(goal_task(0))
    site.stop()
    with pytest.raises(InfrastructureError):
        env.step("search[mug]")
    site.stop = lambda: None  # already stopped


def test_closed_port_is_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with WebShopEnvironment(url, timeout_s=2) as e:
        with pytest.raises(BenchmarkUnavailableError) as info:
            e.reset(goal_task(0))
    msg = str(info.value)
    assert url in msg and "run_dev.sh" in msg and "princeton-nlp/WebShop" in msg and "setup.sh" in msg


def test_step_before_reset_and_bad_task(site, env):
    with pytest.raises(InfrastructureError):
        env.step("search[mug]")
    with pytest.raises(ValueError, match="goal_index"):
        env.reset(Task(task_id=0, benchmark="webshop", task_type="webshop"))


def test_registry_and_engine_info(site):
    e = make_env("webshop", base_url=site.base_url)
    assert isinstance(e, WebShopEnvironment) and e.benchmark == "webshop"
    info = e.engine_info()
    assert info["base_url"] == site.base_url and info["success"] == "reward == 1.0"
    assert "search[query]" in e.action_help and "click[" in e.action_help


# -- partition -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def goals_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("ws") / "human_goals.json"
    p.write_text(json.dumps([f"fake instruction number {i}" for i in range(PAPER_N_GOALS)]))
    return p


def test_partition_counts_and_disjointness(goals_file):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the full 12,087 goals: no warning
        part = build_webshop_partition(goals_file)
    assert part.benchmark == "webshop" and part.seed == PARTITION_SEED
    held = [t.task_id for t in part.heldout]
    train = [t.task_id for t in part.train]
    assert held == list(range(100))
    assert len(train) == 200 == len(set(train)) and train == sorted(train)
    assert min(train) >= 100 and max(train) < PAPER_N_GOALS
    assert not set(held) & set(train)
    t = part.train[0]
    assert t.env_args == {"goal_index": t.task_id} and t.split == "train" and t.task_type == "webshop"
    assert t.instruction == f"fake instruction number {t.task_id}"
    assert part.heldout[5].split == "heldout" and part.heldout[5].env_args == {"goal_index": 5}
    assert part.drawn_with["n_goals"] == PAPER_N_GOALS and part.drawn_with["n_goals_matches_paper"]


def test_partition_reproducible_and_seed_dependent(goals_file, tmp_path):
    a, b = build_webshop_partition(goals_file), build_webshop_partition(goals_file, seed=PARTITION_SEED)
    assert a == b and a.hash == b.hash
    c = build_webshop_partition(goals_file, seed=43)
    assert [t.task_id for t in c.heldout] == list(range(100))
    assert [t.task_id for t in c.train] != [t.task_id for t in a.train]
    assert a.hash != c.hash
    path = save_partition(a, tmp_path / "webshop.json")
    assert load_partition("webshop", path) == a
    assert draw_webshop_split(PAPER_N_GOALS)[1] == [t.task_id for t in a.train]


def test_missing_partition_names_the_file_and_the_command(tmp_path, monkeypatch):
    from antipersist_lib.envs import partitions

    monkeypatch.setattr(partitions, "partition_dirs", lambda: [tmp_path / "mine", tmp_path / "kit"])
    with pytest.raises(FileNotFoundError) as info:
        load_partition("webshop")
    msg = str(info.value)
    assert str(tmp_path / "mine" / "webshop.json") in msg and str(tmp_path / "kit" / "webshop.json") in msg
    assert "`python -m antipersist_lib partition webshop --goals <your WebShop instruction file" in msg


def test_users_partition_folder_is_written_and_read_first(goals_file, tmp_path, monkeypatch):
    """ANTIPERSIST_PARTITIONS: the CLI's default destination, searched before the kit's folder (the
    other benchmarks still come from the kit)."""
    from antipersist_lib.cli import main

    monkeypatch.setenv("ANTIPERSIST_PARTITIONS", str(tmp_path / "mine"))
    assert main(["partition", "webshop", "--goals", str(goals_file)]) == 0
    assert load_partition("webshop") == build_webshop_partition(goals_file)
    assert (tmp_path / "mine" / "webshop.json").exists() and len(list((tmp_path / "mine").iterdir())) == 1
    assert len(load_partition("alfworld").heldout) == 134


def test_partition_from_goal_objects_and_wrong_count(tmp_path):
    p = tmp_path / "goals.json"
    p.write_text(
        json.dumps(
            [{"asin": f"A{i}", "instruction_text": f"goal {i}, and price lower than 10.00 dollars"} for i in range(500)]
        )
    )
    with pytest.warns(UserWarning, match="500 goals"):
        part = build_webshop_partition(p)
    assert part.drawn_with["n_goals"] == 500 and not part.drawn_with["n_goals_matches_paper"]
    assert len(part.train) == 200 and len(part.heldout) == 100
    assert part.heldout[3].instruction.startswith("goal 3")
    with pytest.raises(ValueError):
        build_webshop_partition(_write(tmp_path / "tiny.json", ["a"] * 299))
    with pytest.raises(ValueError):
        build_webshop_partition(_write(tmp_path / "bad.json", [1, 2, 3]))


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_items_human_ins_dict_form(tmp_path):
    import random

    human = {
        "B2": [
            {
                "asin": "B2",
                "instruction": "i want a red lamp.",
                "instruction_attributes": ["red"],
                "instruction_options": [],
            },
            {
                "asin": "B2",
                "instruction": "skipped: no attributes",
                "instruction_attributes": [],
                "instruction_options": [],
            },
        ],
        "B1": [
            {
                "asin": "B1",
                "instruction": "i need a green cup",
                "instruction_attributes": ["green"],
                "instruction_options": [],
            }
        ],
        "B3": [
            {"asin": "B3", "instruction": "a blue pen..", "instruction_attributes": ["blue"], "instruction_options": []}
        ],
    }
    hp = _write(tmp_path / "items_human_ins.json", human)
    # the site lists goals in product-file order, then shuffles them with random.seed(233)
    products = [{"asin": "B1"}, {"asin": "nan"}, {"asin": "B3"}, {"asin": "B1"}, {"asin": "B2"}]
    pp = _write(tmp_path / "items_shuffle.json", products)
    goals, info = load_webshop_goals(hp, products_path=pp)
    expected = ["i need a green cup", "a blue pen", "i want a red lamp"]
    random.Random(233).shuffle(expected)
    assert goals == expected and info["order_exact"] is True
    goals2, info2 = load_webshop_goals(hp)
    assert sorted(goals2) == sorted(expected) and info2["order_exact"] is False
