"""The one conversion step, with its model: a runtime-spec config (``hostjob.spec``)
becomes the job container's internal configuration (``jobconfig``), decided once at
``create`` by ``convert`` -- with the volumes (``volumes``), what Kubernetes' runtimes
say of a container (``pods``) and the operator's user and secrets annotations
(``isolation``). Pure: it reads no file and probes nothing."""
