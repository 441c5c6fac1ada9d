"""The Unix-socket listener of Executor Protocol v1: the socket's path, mode and binding
(``socket_path``), the listener (``listener``), one connection (``connection``) and its
request deadlines (``deadlines``)."""
