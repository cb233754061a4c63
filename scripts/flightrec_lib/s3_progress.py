"""s3_progress: wraps the botocore client s3_source downloads with, so that
a download shows progress on a terminal and skips the keys the selection
(--pid/--service/--host) rules out before fetching them.

s3_source stays the one place that lists and fetches; this wrapper only
sees what passes through the client: the listing pages (filtered here, and
counted for the progress total) and each object's body (its bytes counted
as they are read; the end of a body is one segment done).
"""


class ProgressClient:
    def __init__(self, client, selection, progress):
        self._client = client
        self._selection = selection
        self._progress = progress
        self.skipped = 0  # keys left out by the selection

    def __getattr__(self, name):  # head_object and anything else: the real client's
        return getattr(self._client, name)

    def get_paginator(self, operation):
        paginator = self._client.get_paginator(operation)
        if operation != "list_objects_v2":
            return paginator
        return _FilteringPaginator(paginator, self)

    def get_object(self, **kwargs):
        response = self._client.get_object(**kwargs)
        response = dict(response)
        response["Body"] = _CountingBody(response["Body"], self._progress)
        return response

    def _filter_page(self, page):
        contents = page.get("Contents")
        if not contents:
            return page
        kept = []
        for obj in contents:
            key = obj.get("Key", "")
            if key.endswith(".seg") and self._selection and not self._selection.key_may_match(key):
                self.skipped += 1
                continue
            kept.append(obj)
            if key.endswith(".seg"):
                self._progress.total = (self._progress.total or 0) + 1
        page = dict(page)
        page["Contents"] = kept
        return page


class _FilteringPaginator:
    def __init__(self, paginator, owner):
        self._paginator = paginator
        self._owner = owner

    def paginate(self, **kwargs):
        for page in self._paginator.paginate(**kwargs):
            yield self._owner._filter_page(page)


class _CountingBody:
    def __init__(self, body, progress):
        self._body = body
        self._progress = progress
        self._finished = False

    def read(self, *args):
        chunk = self._body.read(*args)
        if chunk:
            self._progress.add_bytes(len(chunk))
        elif not self._finished:
            self._finished = True
            self._progress.advance()
        return chunk

    def __getattr__(self, name):
        return getattr(self._body, name)
