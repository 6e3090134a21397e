"""Who may reach kcp: OIDC, ServiceAccount tokens, token files, authorization webhooks and the
front-proxy's group filter, as settings of Shards and FrontProxies and as kcp's flags."""
