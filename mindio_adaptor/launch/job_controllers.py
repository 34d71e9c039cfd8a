"""What a launcher tells the recovery controllers of its job (launch/controller_report carries each message):
that a worker's process ended, and that nothing will replace the ranks of a lost node. The controllers are
those the launchers' store names at that moment, in the list's order: an unreachable one is passed over, and
so is an idle backup that never saw the rank register, until the one leading the job answers."""
from __future__ import annotations

import os
from typing import List, Optional

from mindio_adaptor.core.detection.exit_codes import describe
from mindio_adaptor.core.job.controller_address import ENV_TOKEN
from mindio_adaptor.launch.controller_report import (ControllerContact, ControllerReportError, find_controllers,
                                                     report_no_replacement, report_process_ended)
from mindio_adaptor.launch.membership import KnownLists
from mindio_adaptor.launch.worker import Worker


class JobControllers:
    """`lists`: the job's lists as the launcher last read them (the controllers' list, the workers' store port)."""

    def __init__(self, master_addr: str, token: str, lists: KnownLists, log):
        self.master_addr, self.token, self.lists, self.log = master_addr, token, lists, log

    def process_ended(self, worker: Worker, code: int) -> bool:
        """The OS's word that a rank's process ended, to the recovery controller leading the job (when the
        job has one): the controllers of the list in order, past those unreachable or not leading. True
        when the controller answers that the rank had left the job before (its training was over)."""
        what = f"rank {worker.rank}: the recovery controller was not told that pid {worker.pid} ended"
        contacts, errors = self.contacts(what) or [], []
        for contact in contacts:
            try:
                answer = report_process_ended(contact, worker.rank, worker.pid, describe(code))
            except ControllerReportError as err:
                errors.append(str(err))
                continue
            if "never registered" in answer.message and contact is not contacts[-1]:  # an idle backup
                continue
            self.log.info("rank %d: told the recovery controller that pid %d ended: %s", worker.rank, worker.pid,
                          answer.message)
            return answer.rank_had_left
        if errors:
            self.log.info("%s: %s", what, "; ".join(errors))
        return False

    def no_replacement(self, ranks: List[int], why: str) -> bool:
        """That nothing will replace `ranks`, to every controller of the list (a backup that takes over later
        needs it too); True once one took it, or when the job has none."""
        what = f"the recovery controller was not told that ranks {ranks} will not be replaced"
        contacts, answers, errors = self.contacts(what), [], []
        if contacts is None:
            return False  # tried again at the next check
        for contact in contacts:
            try:
                answers.append(report_no_replacement(contact, ranks, why))
            except ControllerReportError as err:
                errors.append(str(err))
        if answers:
            self.log.info("told the recovery controller that ranks %s will not be replaced: %s", ranks, answers[0])
        elif errors:
            self.log.info("%s: %s", what, "; ".join(errors))
        return bool(answers) or not contacts

    def contacts(self, what: str) -> Optional[List[ControllerContact]]:
        """The job's controllers as the launchers' store names them now ([]: no high availability); None
        when their facts could not be read, which is logged with `what`."""
        env = {**os.environ, **self.lists.controllers, ENV_TOKEN: self.token}
        try:
            return find_controllers(self.master_addr, self.lists.master_port, env)
        except ControllerReportError as err:
            self.log.info("%s: %s", what, err)
            return None
