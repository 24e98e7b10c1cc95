"""Work on a Dask cluster: connecting to or starting one (:mod:`.clients`), a bounded window of
tasks and what a worker keeps open between them (:mod:`.tasks`), and the cluster forms of the store's
bulk verbs — copying an array's rows (:mod:`.copy`) and summarising statistics (:mod:`.stats`).
Sits below the store: tasks reach stores through the registry or an opener they are handed, never
by importing the store (``dask.distributed`` is imported lazily; extra ``replaybuf[dask]``)."""
