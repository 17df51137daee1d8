"""WebShop (Yao et al., 2022) driven over HTTP: the adapter talks to a running WebShop site.

Modules (import each name from the module that defines it; nothing is re-exported here):

* ``pages``: the page model and HTML parsing -- ``Clickable``, ``Page``, ``parse_page`` (one
  WebShop page into its kind, instruction, simple-mode text observation and clickables) and
  ``parse_webshop_action`` (``search[...]`` / ``click[...]``).
* ``client``: ``WebShopEnvironment``, the HTTP adapter to a running WebShop site (sessions,
  requests, episode logic, success and score), with ``ACTION_HELP``, ``DEFAULT_BASE_URL`` and
  ``SERVER_HINT`` (how to start the site).
* ``goals``: the goal file and the paper's D.1 task partition -- ``load_webshop_goals``,
  ``draw_webshop_split``, ``build_webshop_partition`` and the counts and seeds they use.
"""
