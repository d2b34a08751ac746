"""The operator console's logic apart from its pages: the search, the selection a list's filter makes,
and the bulk actions run as jobs of the queue (django_jobq.admin is the pages)."""
