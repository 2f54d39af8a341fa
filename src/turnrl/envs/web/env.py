"""The browsing env: answer a multi-hop question by searching and reading the offline site.

Every page the agent sees is fetched over HTTP from the family's loopback server. The network
guarantee is structural: requests go through ``http.client.HTTPConnection`` to the server's own
``127.0.0.1:<port>`` and only the path comes from the agent, so no tool can reach any other
host (``open`` refuses other hosts and schemes with an observation; no proxy, no redirects).
"""

from __future__ import annotations

import asyncio
import http.client
import re
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit

from turnrl.envs.base import ToolEnv, ToolError, ToolOutput
from turnrl.envs.web.grading import ask_judge, exact_match, token_f1
from turnrl.envs.web.text import Document, html_to_document
from turnrl.types import RewardResult, Task

INSTRUCTIONS = (
    "Answer the question by browsing an offline encyclopedia. Tools: search(query) lists "
    "matching pages; open(url, page) shows a page as text with numbered links; "
    "follow(link_number) opens link [n] of the current page; find(text) finds lines of the "
    "current page; answer(text) gives the final answer (a short exact value) and ends the episode."
)
_DOMAIN = re.compile(r"^[\w-]+(\.[\w-]+)+(/|$)")
_MAX_FIND = 8


def _http_get(host: str, port: int, path: str, timeout: float) -> tuple[int, str]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        conn.close()


class WebEnv(ToolEnv):
    name = "web"
    tools = ("search", "open", "find", "follow", "answer")

    def __init__(
        self,
        base_url: str,
        page_size: int = 800,
        metric: str = "exact",
        f1_success: float = 0.8,
        judge: Any = None,
        timeout: float = 5.0,
    ) -> None:
        site = urlsplit(base_url)
        assert site.hostname and site.port, f"bad site url {base_url!r}"
        self._host, self._port, self._netloc = site.hostname, site.port, site.netloc
        self.page_size, self.metric, self.f1_success = page_size, metric, f1_success
        self.judge, self.timeout = judge, timeout
        self.question = self.gold = ""
        self.submitted: str | None = None
        self.doc: Document | None = None
        self.page = 1

    async def reset(self, task: Task) -> str:
        self.question, self.gold = task.payload["question"], task.payload["answer"]
        self.submitted, self.doc, self.page = None, None, 1
        self.instructions = INSTRUCTIONS
        return f"Question: {self.question}"

    def anchor(self, observation: str) -> Any:
        return (self.doc.path if self.doc else None, self.page, self.submitted is not None)

    # --- tools -------------------------------------------------------------------------------

    async def search(self, query: str) -> str:
        """Search the encyclopedia; returns the best pages as numbered links with snippets."""
        if not query.strip():
            raise ToolError("the query is empty")
        return await self._show("/search?" + urlencode({"q": query}), 1)

    async def open(self, url: str, page: int = 1) -> str:
        """Open a page of the encyclopedia (a path like /wiki/Name) at the given page number."""
        return await self._show(self._site_path(url), page)

    async def follow(self, link_number: int) -> str:
        """Open link [link_number] of the current page."""
        if self.doc is None:
            raise ToolError("no page is open: search or open a page first")
        if not 1 <= link_number <= len(self.doc.links):
            raise ToolError(f"no link [{link_number}]; this page has links 1-{len(self.doc.links)}")
        return await self._show(self._site_path(self.doc.links[link_number - 1]), 1)

    def find(self, text: str) -> str:
        """Find lines of the current page containing the text (case-insensitive)."""
        if self.doc is None:
            raise ToolError("no page is open: search or open a page first")
        needle = text.strip().lower()
        if not needle:
            raise ToolError("the text to find is empty")
        hits = [
            f"p{p}: {line}"
            for p, lines in enumerate(self.doc.pages, 1)
            for line in lines
            if needle in line.lower()
        ]
        if not hits:
            return f"No line of {self.doc.path} contains '{text}'."
        more = f"\n({len(hits) - _MAX_FIND} more)" if len(hits) > _MAX_FIND else ""
        return f"'{text}' in {self.doc.path}:\n" + "\n".join(hits[:_MAX_FIND]) + more

    def answer(self, text: str) -> ToolOutput:
        """Give the final answer and end the episode."""
        self.submitted = text
        return ToolOutput("Answer recorded.", done=True)

    # --- grading -----------------------------------------------------------------------------

    async def grade(self) -> RewardResult:
        prediction = self.submitted or ""
        em, f1 = exact_match(prediction, self.gold), token_f1(prediction, self.gold)
        if self.metric == "exact":
            reward, success = em, em == 1.0
        else:
            reward, success = f1, f1 >= self.f1_success
        components = {"exact": em, "f1": f1, "answered": float(self.submitted is not None)}
        info: dict[str, Any] = {"answer": prediction, "gold": self.gold}
        # An exact match needs no judge; a judge is asked only about the other answers.
        if self.judge is not None and self.submitted is not None and em < 1.0:
            verdict, note = await ask_judge(self.judge, self.question, self.gold, prediction)
            if verdict is None:
                components["judge_skipped"] = 1.0  # not a flag: flags mark exploits
                info["judge"] = {"status": "skipped", "reason": note}
            else:
                components["judge"] = float(verdict)
                reward, success = float(verdict), verdict
                info["judge"] = {"status": "ok", "reply": note}
        return RewardResult(
            reward=reward,
            success=success,
            proxy_success=float(success),
            components=components,
            info=info,
        )

    # --- helpers -----------------------------------------------------------------------------

    def _site_path(self, url: str) -> str:
        """The request path on the offline site for ``url``, or a ToolError for anything off it."""
        url = url.strip()
        parts = urlsplit(url)
        if parts.scheme or parts.netloc:
            if parts.scheme != "http" or parts.netloc != self._netloc:
                raise ToolError(
                    f"{url} is outside the offline encyclopedia; only its pages can be opened "
                    "(paths like /wiki/Name)"
                )
        elif _DOMAIN.match(url):
            raise ToolError(f"{url} is outside the offline encyclopedia (no internet here)")
        path = parts.path
        if not path.startswith("/"):
            path = "/wiki/" + path  # a bare title: "Ana Korvel" -> /wiki/Ana_Korvel
        if path.startswith("/wiki/"):
            path = "/wiki/" + unquote(path[len("/wiki/") :]).strip().replace(" ", "_")
        path = quote(path, safe="/_-.~%()',")
        return path + (f"?{quote(parts.query, safe='=&+%')}" if parts.query else "")

    async def _show(self, path: str, page: int) -> str:
        doc = self.doc
        if doc is None or doc.path != path:
            try:
                status, body = await asyncio.to_thread(
                    _http_get, self._host, self._port, path, self.timeout
                )
            except (OSError, http.client.HTTPException) as e:
                raise ToolError(f"the site did not answer ({type(e).__name__})") from None
            if status == 404:
                raise ToolError(f"no page at {path}; use search to find pages")
            if status != 200:
                raise ToolError(f"the site answered {status} for {path}")
            doc = html_to_document(path, body, self.page_size)
        if not 1 <= page <= len(doc.pages):
            raise ToolError(f"{path} has pages 1-{len(doc.pages)}")
        self.doc, self.page = doc, page
        return doc.page_text(page)
